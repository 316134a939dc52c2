// PReLU (see the header).
#include "layers/prelu.h"

#include "engine/errors.h"
#include "engine/ops.h"

namespace keras::layers {

PReLU::PReLU(PReLUOptions options) : LayerOf("p_re_lu", options.name), options_(std::move(options)) {
  if (!options_.alpha_initializer) options_.alpha_initializer = initializers::zeros();
}

void PReLU::build(const Shape& input_shape) {
  if (input_shape.size() < 2) {
    throw ShapeError(str("PReLU '", name(), "' needs inputs with a batch dimension and at least one more, got ",
                         "shape ", shape_to_string(input_shape)));
  }
  alpha_shape_.assign(input_shape.begin() + 1, input_shape.end());
  for (int axis : options_.shared_axes) {
    if (axis < 1 || axis >= static_cast<int>(input_shape.size())) {
      throw ValueError(str("PReLU '", name(), "': shared axis ", axis, " is out of range for inputs of shape ",
                           shape_to_string(input_shape), "; expected an axis in [1, ", input_shape.size() - 1, "]"));
    }
    alpha_shape_[static_cast<std::size_t>(axis - 1)] = 1;
  }
  alpha_ = add_weight("alpha", alpha_shape_, options_.alpha_initializer);
}

Tensor PReLU::call(const Tensor& inputs, bool) {
  const Shape& shape = inputs.shape();  // global: the layer is written once, on whole tensors
  if (shape.size() != alpha_shape_.size() + 1) {
    throw ShapeError(str("PReLU '", name(), "' was built for inputs of rank ", alpha_shape_.size() + 1,
                         ", got shape ", shape_to_string(shape)));
  }
  // Keras: relu(x) - alpha * relu(-x).
  return ops::relu(inputs) - alpha_ * ops::relu(-inputs);
}

}  // namespace keras::layers
