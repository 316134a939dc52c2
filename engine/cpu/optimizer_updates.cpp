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

// The slots a setting leaves out are null; the branches on them are hoisted out of the loop
// by the compiler (the pointers do not change inside it).
template <typename T>
void rmsprop_range(T* __restrict w, const T* __restrict g, T* __restrict velocity, T* __restrict momentum,
                   T* __restrict average, RmspropConstants<T> c, std::int64_t begin, std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) {
    rmsprop_step(w[i], g[i], velocity[i], momentum ? momentum + i : nullptr, average ? average + i : nullptr, c);
  }
}

template <typename T>
void adagrad_range(T* __restrict w, const T* __restrict g, T* __restrict accumulator, AdagradConstants<T> c,
                   std::int64_t begin, std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) adagrad_step(w[i], g[i], accumulator[i], c);
}

template <typename T>
T* data_or_null(Tensor& slot) {
  return slot.defined() ? static_cast<T*>(slot.raw_data()) : nullptr;
}

}  // namespace

void rmsprop_update(const RmspropUpdate& settings, Tensor& variable, const Tensor& gradient, Tensor& velocity,
                    Tensor& momentum, Tensor& average_gradient) {
  dispatch_floating(variable.dtype(), "RMSprop", [&](auto zero) {
    using T = decltype(zero);
    T* w = static_cast<T*>(variable.raw_data());
    const T* g = static_cast<const T*>(gradient.raw_data());
    T* v = static_cast<T*>(velocity.raw_data());
    T* m = data_or_null<T>(momentum);
    T* a = data_or_null<T>(average_gradient);
    RmspropConstants<T> constants = rmsprop_constants<T>(settings);
    parallel_for(variable.size(), kParallelGrain, [&](std::int64_t begin, std::int64_t end) {
      rmsprop_range(w, g, v, m, a, constants, begin, end);
    });
  });
}

void adagrad_update(const AdagradUpdate& settings, Tensor& variable, const Tensor& gradient, Tensor& accumulator) {
  dispatch_floating(variable.dtype(), "Adagrad", [&](auto zero) {
    using T = decltype(zero);
    T* w = static_cast<T*>(variable.raw_data());
    const T* g = static_cast<const T*>(gradient.raw_data());
    T* s = static_cast<T*>(accumulator.raw_data());
    AdagradConstants<T> constants = adagrad_constants<T>(settings);
    parallel_for(variable.size(), kParallelGrain, [&](std::int64_t begin, std::int64_t end) {
      adagrad_range(w, g, s, constants, begin, end);
    });
  });
}

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
