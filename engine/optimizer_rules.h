// One element of the fused, in-place optimizer updates, following Keras' formulas exactly,
// written once for the CPU loops (engine/cpu/optimizer_updates.cpp) and the GPU kernels
// (engine/cuda/optimizer_updates.h):
//   SGD:  v = momentum*v - lr*g;  w += nesterov ? momentum*v - lr*g : v   (w -= lr*g if no momentum)
//   Adam: m += (g-m)(1-b1);  v += (g²-v)(1-b2);
//         w -= lr*sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v)+eps)
//   RMSprop: v = rho*v + (1-rho)g²;  centered: a = rho*a + (1-rho)g, d = v - a² + eps, else d = v + eps;
//         step = lr*g / sqrt(d);  with momentum: m = momentum*m + step, w -= m; else w -= step
//   Adagrad: s += g²;  w -= lr*g / sqrt(s + eps)   (s starts at initial_accumulator_value)
//   weight decay (AdamW and any optimizer given one): w -= w*wd*lr, before the update.
#pragma once
#include <cmath>

#include "engine/backend.h"
#include "engine/host_device.h"

namespace keras::optimizer_rules {

template <typename T>
struct AdamConstants {
  T alpha, one_minus_beta_1, one_minus_beta_2, epsilon, decay;
};

template <typename T>
AdamConstants<T> adam_constants(const AdamUpdate& settings) {
  double step = static_cast<double>(settings.step);
  return {static_cast<T>(settings.learning_rate * std::sqrt(1.0 - std::pow(settings.beta_2, step)) /
                         (1.0 - std::pow(settings.beta_1, step))),
          static_cast<T>(1.0 - settings.beta_1), static_cast<T>(1.0 - settings.beta_2),
          static_cast<T>(settings.epsilon),
          static_cast<T>(settings.weight_decay * settings.learning_rate)};
}

template <typename T>
KERAS_HOST_DEVICE inline void adam_step(T& w, T g, T& m, T& v, const AdamConstants<T>& c) {
  T weight = w - w * c.decay;
  T first = m + (g - m) * c.one_minus_beta_1;
  T second = v + (g * g - v) * c.one_minus_beta_2;
  m = first;
  v = second;
  w = weight - c.alpha * first / (std::sqrt(second) + c.epsilon);
}

template <typename T>
struct SgdConstants {
  T learning_rate, decay, momentum;
  bool nesterov;
};

template <typename T>
SgdConstants<T> sgd_constants(const SgdUpdate& settings) {
  return {static_cast<T>(settings.learning_rate),
          static_cast<T>(settings.weight_decay * settings.learning_rate),
          static_cast<T>(settings.momentum), settings.nesterov};
}

// Without momentum (no velocity slot).
template <typename T>
KERAS_HOST_DEVICE inline void sgd_step(T& w, T g, const SgdConstants<T>& c) {
  w = (w - w * c.decay) - c.learning_rate * g;
}

template <typename T>
KERAS_HOST_DEVICE inline void momentum_step(T& w, T g, T& v, const SgdConstants<T>& c) {
  T weight = w - w * c.decay;
  T velocity = c.momentum * v - c.learning_rate * g;
  v = velocity;
  w = c.nesterov ? weight + c.momentum * velocity - c.learning_rate * g : weight + velocity;
}

template <typename T>
struct RmspropConstants {
  T learning_rate, rho, one_minus_rho, momentum, epsilon, decay;
};

template <typename T>
RmspropConstants<T> rmsprop_constants(const RmspropUpdate& settings) {
  return {static_cast<T>(settings.learning_rate), static_cast<T>(settings.rho),
          static_cast<T>(1.0 - settings.rho), static_cast<T>(settings.momentum),
          static_cast<T>(settings.epsilon), static_cast<T>(settings.weight_decay * settings.learning_rate)};
}

// `momentum` and `average` are the slots' elements, or null where the settings use none.
template <typename T>
KERAS_HOST_DEVICE inline void rmsprop_step(T& w, T g, T& velocity, T* momentum, T* average,
                                           const RmspropConstants<T>& c) {
  T weight = w - w * c.decay;
  T v = c.rho * velocity + c.one_minus_rho * (g * g);
  velocity = v;
  T denominator = v + c.epsilon;
  if (average != nullptr) {
    T a = c.rho * *average + c.one_minus_rho * g;
    *average = a;
    denominator = v - a * a + c.epsilon;
  }
  T increment = c.learning_rate * g / std::sqrt(denominator);
  if (momentum != nullptr) {
    T m = c.momentum * *momentum + increment;
    *momentum = m;
    w = weight - m;
  } else {
    w = weight - increment;
  }
}

template <typename T>
struct AdagradConstants {
  T learning_rate, epsilon, decay;
};

template <typename T>
AdagradConstants<T> adagrad_constants(const AdagradUpdate& settings) {
  return {static_cast<T>(settings.learning_rate), static_cast<T>(settings.epsilon),
          static_cast<T>(settings.weight_decay * settings.learning_rate)};
}

template <typename T>
KERAS_HOST_DEVICE inline void adagrad_step(T& w, T g, T& accumulator, const AdagradConstants<T>& c) {
  T weight = w - w * c.decay;
  T sum = accumulator + g * g;
  accumulator = sum;
  w = weight - c.learning_rate * g / std::sqrt(sum + c.epsilon);
}

}  // namespace keras::optimizer_rules
