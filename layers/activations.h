// Activation functions by Keras name, as used by Dense(…, activation) and Activation(…).
#pragma once
#include <functional>
#include <string>

#include "engine/tensor.h"

namespace keras::activations {

using ActivationFn = std::function<Tensor(const Tensor&)>;

// relu, gelu, tanh, sigmoid, softmax, log_softmax, silu (swish), leaky_relu, elu, selu,
// softplus, linear (and "" for none), with Keras 3's constants.
// Throws ValueError naming the accepted names for anything else.
ActivationFn get(const std::string& name);
// Whether the activation acts on each element alone (all but softmax and log_softmax, which
// normalise over the last axis): element-wise ones keep a sharded input sharded.
bool is_elementwise(const std::string& name);

}  // namespace keras::activations
