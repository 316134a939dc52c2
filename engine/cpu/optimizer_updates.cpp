// CPU optimizer updates: the loops over engine/optimizer_rules.h's element steps.
// The loops live in plain functions taking __restrict pointers: captured by a lambda, the
// pointers lost that promise and GCC kept the Adam loop scalar (30% of an MLP training step,
// measured with perf; vectorised it is memory-bound).
#include "engine/cpu/kernels.h"
#include "engine/cpu/strided_loops.h"
#include "engine/optimizer_rules.h"

namespace keras::cpu {
namespace {

using namespace optimizer_rules;

template <typename T>
void adam_range(T* __restrict w, const T* __restrict g, T* __restrict m, T* __restrict v,
                std::int64_t begin, std::int64_t end, AdamConstants<T> c) {
  for (std::int64_t i = begin; i < end; ++i) adam_step(w[i], g[i], m[i], v[i], c);
}

template <typename T>
void sgd_range(T* __restrict w, const T* __restrict g, SgdConstants<T> c, std::int64_t begin,
               std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) sgd_step(w[i], g[i], c);
}

template <typename T>
void momentum_range(T* __restrict w, const T* __restrict g, T* __restrict v, SgdConstants<T> c,
                    std::int64_t begin, std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) momentum_step(w[i], g[i], v[i], c);
}

}  // namespace

void sgd_update(const SgdUpdate& settings, Tensor& variable, const Tensor& gradient,
                Tensor& velocity) {
  dispatch_floating(variable.dtype(), "SGD", [&](auto zero) {
    using T = decltype(zero);
    T* w = static_cast<T*>(variable.raw_data());
    const T* g = static_cast<const T*>(gradient.raw_data());
    T* v = velocity.defined() ? static_cast<T*>(velocity.raw_data()) : nullptr;
    SgdConstants<T> constants = sgd_constants<T>(settings);
    parallel_for(variable.size(), kParallelGrain, [&](std::int64_t begin, std::int64_t end) {
      if (v == nullptr) {
        sgd_range(w, g, constants, begin, end);
      } else {
        momentum_range(w, g, v, constants, begin, end);
      }
    });
  });
}

void adam_update(const AdamUpdate& settings, Tensor& variable, const Tensor& gradient,
                 Tensor& first_moment, Tensor& second_moment) {
  dispatch_floating(variable.dtype(), "Adam", [&](auto zero) {
    using T = decltype(zero);
    T* w = static_cast<T*>(variable.raw_data());
    const T* g = static_cast<const T*>(gradient.raw_data());
    T* m = static_cast<T*>(first_moment.raw_data());
    T* v = static_cast<T*>(second_moment.raw_data());
    AdamConstants<T> constants = adam_constants<T>(settings);
    parallel_for(variable.size(), kParallelGrain, [&](std::int64_t begin, std::int64_t end) {
      adam_range(w, g, m, v, begin, end, constants);
    });
  });
}

}  // namespace keras::cpu
