// Activation lookup by name.
#include "layers/activations.h"

#include "engine/errors.h"
#include "engine/ops.h"

namespace keras::activations {

namespace {
// x where x > 0, alpha * (e^x - 1) elsewhere. The exponential takes min(x, 0), so that the
// branch not taken cannot overflow into a NaN gradient.
Tensor elu(const Tensor& x, double alpha) {
  Tensor negative_part = ops::minimum(x, ops::scalar_like(x, 0.0));
  return ops::where(ops::greater(x, ops::scalar_like(x, 0.0)), x, alpha * (ops::exp(negative_part) - 1.0));
}
}  // namespace

ActivationFn get(const std::string& name) {
  if (name.empty() || name == "linear") return [](const Tensor& x) { return x; };
  if (name == "relu") return [](const Tensor& x) { return ops::relu(x); };
  if (name == "gelu") return [](const Tensor& x) { return ops::gelu(x); };
  if (name == "tanh") return [](const Tensor& x) { return ops::tanh(x); };
  if (name == "sigmoid") return [](const Tensor& x) { return ops::sigmoid(x); };
  if (name == "softmax") return [](const Tensor& x) { return ops::softmax(x, -1); };
  if (name == "log_softmax") return [](const Tensor& x) { return ops::log_softmax(x, -1); };
  if (name == "silu" || name == "swish") return [](const Tensor& x) { return ops::silu(x); };
  // Keras 3's leaky_relu: negative_slope 0.2.
  if (name == "leaky_relu") {
    return [](const Tensor& x) { return ops::where(ops::greater(x, ops::scalar_like(x, 0.0)), x, 0.2 * x); };
  }
  if (name == "elu") return [](const Tensor& x) { return elu(x, 1.0); };
  if (name == "selu") {
    // Klambauer et al.'s constants, as keras.activations.selu.
    return [](const Tensor& x) { return 1.0507009873554805 * elu(x, 1.6732632423543772); };
  }
  if (name == "softplus") {
    // log(1 + e^x) as relu(x) + log(1 + e^-|x|): no overflow for large x.
    return [](const Tensor& x) { return ops::relu(x) + ops::log(1.0 + ops::exp(-ops::abs(x))); };
  }
  throw ValueError(str("unknown activation '", name,
                       "'; expected one of relu, gelu, tanh, sigmoid, softmax, log_softmax, silu (swish), ",
                       "leaky_relu, elu, selu, softplus, linear"));
}

bool is_elementwise(const std::string& name) {
  get(name);  // an unknown name is an error here too
  return name != "softmax" && name != "log_softmax";
}

}  // namespace keras::activations
