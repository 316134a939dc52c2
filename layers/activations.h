// Activation functions by Keras name, as used by Dense(…, activation) and Activation(…).
#pragma once
#include <functional>
#include <string>

#include "engine/tensor.h"

namespace keras::activations {

using ActivationFn = std::function<Tensor(const Tensor&)>;

// relu, gelu, tanh, sigmoid, softmax, log_softmax, linear (and "" for none).
// Throws ValueError naming the accepted names for anything else.
ActivationFn get(const std::string& name);

}  // namespace keras::activations
