// Fused, in-place optimizer updates, following Keras' formulas exactly:
//   SGD:  v = momentum*v - lr*g;  w += nesterov ? momentum*v - lr*g : v   (w -= lr*g if no momentum)
//   Adam: m += (g-m)(1-b1);  v += (g²-v)(1-b2);
//         w -= lr*sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v)+eps)
//   weight decay (AdamW and any optimizer given one): w -= w*wd*lr, before the update.
#include <cmath>

#include "engine/cpu/kernels.h"
#include "engine/cpu/strided_loops.h"

namespace keras::cpu {

void sgd_update(const SgdUpdate& settings, Tensor& variable, const Tensor& gradient,
                Tensor& velocity) {
  dispatch_floating(variable.dtype(), "SGD", [&](auto zero) {
    using T = decltype(zero);
    T* w = static_cast<T*>(variable.raw_data());
    const T* g = static_cast<const T*>(gradient.raw_data());
    T* v = velocity.defined() ? static_cast<T*>(velocity.raw_data()) : nullptr;
    T lr = static_cast<T>(settings.learning_rate);
    T momentum = static_cast<T>(settings.momentum);
    T decay = static_cast<T>(settings.weight_decay * settings.learning_rate);
    bool nesterov = settings.nesterov;
    parallel_for(variable.size(), kParallelGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        T weight = w[i] - w[i] * decay;
        if (v == nullptr) {
          w[i] = weight - lr * g[i];
        } else {
          v[i] = momentum * v[i] - lr * g[i];
          w[i] = nesterov ? weight + momentum * v[i] - lr * g[i] : weight + v[i];
        }
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
    double step = static_cast<double>(settings.step);
    T alpha = static_cast<T>(settings.learning_rate *
                             std::sqrt(1.0 - std::pow(settings.beta_2, step)) /
                             (1.0 - std::pow(settings.beta_1, step)));
    T one_minus_beta_1 = static_cast<T>(1.0 - settings.beta_1);
    T one_minus_beta_2 = static_cast<T>(1.0 - settings.beta_2);
    T epsilon = static_cast<T>(settings.epsilon);
    T decay = static_cast<T>(settings.weight_decay * settings.learning_rate);
    parallel_for(variable.size(), kParallelGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        T weight = w[i] - w[i] * decay;
        m[i] += (g[i] - m[i]) * one_minus_beta_1;
        v[i] += (g[i] * g[i] - v[i]) * one_minus_beta_2;
        w[i] = weight - alpha * m[i] / (std::sqrt(v[i]) + epsilon);
      }
    });
  });
}

}  // namespace keras::cpu
