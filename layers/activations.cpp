// Activation lookup by name.
#include "layers/activations.h"

#include "engine/errors.h"
#include "engine/ops.h"

namespace keras::activations {

ActivationFn get(const std::string& name) {
  if (name.empty() || name == "linear") return [](const Tensor& x) { return x; };
  if (name == "relu") return [](const Tensor& x) { return ops::relu(x); };
  if (name == "gelu") return [](const Tensor& x) { return ops::gelu(x); };
  if (name == "tanh") return [](const Tensor& x) { return ops::tanh(x); };
  if (name == "sigmoid") return [](const Tensor& x) { return ops::sigmoid(x); };
  if (name == "softmax") return [](const Tensor& x) { return ops::softmax(x, -1); };
  if (name == "log_softmax") return [](const Tensor& x) { return ops::log_softmax(x, -1); };
  throw ValueError(str("unknown activation '", name,
                       "'; expected one of relu, gelu, tanh, sigmoid, softmax, log_softmax, "
                       "linear"));
}

bool is_elementwise(const std::string& name) {
  get(name);  // an unknown name is an error here too
  return name != "softmax" && name != "log_softmax";
}

}  // namespace keras::activations
