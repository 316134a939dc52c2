// GPU optimizer updates: one thread per element over engine/optimizer_rules.h's steps, the
// formulas the CPU uses.
#pragma once
#include "engine/cuda/kernels.h"
#include "engine/optimizer_rules.h"

namespace keras::gpu_kernels {

template <typename T>
struct AdamBody {
  optimizer_rules::AdamConstants<T> constants;
  T* w;
  const T* g;
  T* m;
  T* v;
  KERAS_HOST_DEVICE void operator()(std::int64_t i) const {
    optimizer_rules::adam_step(w[i], g[i], m[i], v[i], constants);
  }
};

template <typename T>
struct SgdBody {
  optimizer_rules::SgdConstants<T> constants;
  T* w;
  const T* g;
  T* v;  // null without momentum
  KERAS_HOST_DEVICE void operator()(std::int64_t i) const {
    if (v == nullptr) {
      optimizer_rules::sgd_step(w[i], g[i], constants);
    } else {
      optimizer_rules::momentum_step(w[i], g[i], v[i], constants);
    }
  }
};

template <typename T>
struct RmspropBody {
  optimizer_rules::RmspropConstants<T> constants;
  T* w;
  const T* g;
  T* velocity;
  T* momentum;  // null without momentum
  T* average;   // null unless centered
  KERAS_HOST_DEVICE void operator()(std::int64_t i) const {
    optimizer_rules::rmsprop_step(w[i], g[i], velocity[i], momentum ? momentum + i : nullptr,
                                  average ? average + i : nullptr, constants);
  }
};

template <typename T>
struct AdagradBody {
  optimizer_rules::AdagradConstants<T> constants;
  T* w;
  const T* g;
  T* accumulator;
  KERAS_HOST_DEVICE void operator()(std::int64_t i) const {
    optimizer_rules::adagrad_step(w[i], g[i], accumulator[i], constants);
  }
};

template <class Launcher>
void rmsprop_update(Launcher& launcher, const RmspropUpdate& settings, Tensor& variable, const Tensor& gradient,
                    Tensor& velocity, Tensor& momentum, Tensor& average_gradient) {
  dispatch_floating(variable.dtype(), "RMSprop", [&](auto zero) {
    using T = decltype(zero);
    launcher.for_each(variable.size(),
                      RmspropBody<T>{optimizer_rules::rmsprop_constants<T>(settings),
                                     static_cast<T*>(variable.raw_data()),
                                     static_cast<const T*>(gradient.raw_data()),
                                     static_cast<T*>(velocity.raw_data()),
                                     momentum.defined() ? static_cast<T*>(momentum.raw_data()) : nullptr,
                                     average_gradient.defined() ? static_cast<T*>(average_gradient.raw_data())
                                                                : nullptr});
  });
}

template <class Launcher>
void adagrad_update(Launcher& launcher, const AdagradUpdate& settings, Tensor& variable, const Tensor& gradient,
                    Tensor& accumulator) {
  dispatch_floating(variable.dtype(), "Adagrad", [&](auto zero) {
    using T = decltype(zero);
    launcher.for_each(variable.size(),
                      AdagradBody<T>{optimizer_rules::adagrad_constants<T>(settings),
                                     static_cast<T*>(variable.raw_data()),
                                     static_cast<const T*>(gradient.raw_data()),
                                     static_cast<T*>(accumulator.raw_data())});
  });
}

template <class Launcher>
void sgd_update(Launcher& launcher, const SgdUpdate& settings, Tensor& variable,
                const Tensor& gradient, Tensor& velocity) {
  dispatch_floating(variable.dtype(), "SGD", [&](auto zero) {
    using T = decltype(zero);
    launcher.for_each(variable.size(),
                      SgdBody<T>{optimizer_rules::sgd_constants<T>(settings),
                                 static_cast<T*>(variable.raw_data()),
                                 static_cast<const T*>(gradient.raw_data()),
                                 velocity.defined() ? static_cast<T*>(velocity.raw_data()) : nullptr});
  });
}

template <class Launcher>
void adam_update(Launcher& launcher, const AdamUpdate& settings, Tensor& variable,
                 const Tensor& gradient, Tensor& first_moment, Tensor& second_moment) {
  dispatch_floating(variable.dtype(), "Adam", [&](auto zero) {
    using T = decltype(zero);
    launcher.for_each(variable.size(),
                      AdamBody<T>{optimizer_rules::adam_constants<T>(settings),
                                  static_cast<T*>(variable.raw_data()),
                                  static_cast<const T*>(gradient.raw_data()),
                                  static_cast<T*>(first_moment.raw_data()),
                                  static_cast<T*>(second_moment.raw_data())});
  });
}

}  // namespace keras::gpu_kernels
