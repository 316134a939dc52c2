// Dense layer.
#include "layers/dense.h"

#include "distribution/step_context.h"
#include "engine/errors.h"
#include "distribution/sharding_rules.h"
#include "engine/op_dispatch.h"
#include "layers/sharded_projection.h"
#include "engine/ops.h"

namespace keras::layers {

Dense::Dense(std::int64_t units, const std::string& activation, DenseOptions options)
    : Layer("dense", options.name), units_(units), activation_name_(activation),
      activation_(activations::get(activation)), options_(std::move(options)) {
  if (units <= 0) throw ValueError(str("Dense: units must be a positive integer, got ", units));
  if (!options_.kernel_initializer) options_.kernel_initializer = initializers::glorot_uniform();
  if (!options_.bias_initializer) options_.bias_initializer = initializers::zeros();
}

void Dense::build(const Shape& input_shape) {
  if (input_shape.empty()) {
    throw ShapeError(str("Dense '", name(), "' needs inputs of rank >= 1, got a scalar"));
  }
  kernel_ = add_weight("kernel", {input_shape.back(), units_}, options_.kernel_initializer);
  if (options_.use_bias) bias_ = add_weight("bias", {units_}, options_.bias_initializer);
}

Tensor Dense::call(const Tensor& inputs, bool) {
  if (const distribution::ShardingContext* context = distribution::StepContext::sharding()) {
    return call_sharded(*context, inputs);
  }
  if (inputs.rank() == 0 || inputs.shape().back() != kernel_.dim(0)) {
    throw ShapeError(str("Dense '", name(), "' was built for inputs whose last dimension is ",
                         kernel_.dim(0), ", got inputs of shape ",
                         shape_to_string(inputs.shape())));
  }
  Tensor outputs = ops::matmul(inputs.dtype() == kernel_.dtype()
                                   ? inputs
                                   : ops::cast(inputs, kernel_.dtype()),
                               kernel_);
  if (bias_.defined()) outputs = outputs + bias_;
  return activation_(outputs);
}

}  // namespace keras::layers

namespace keras::layers {

Tensor Dense::call_sharded(const distribution::ShardingContext& context, const Tensor& inputs_in) {
  // Computes on local blocks itself (its sharded path predates the propagator): no handler.
  ShardedOpScope local_blocks(nullptr);
  namespace rules = distribution::sharding_rules;
  using distribution::Sharding;
  Tensor inputs = inputs_in.dtype() == kernel_.dtype() ? inputs_in : ops::cast(inputs_in, kernel_.dtype());
  Sharding x_sharding = context.activation_sharding(inputs);
  Sharding kernel_sharding = distribution::variable_sharding(kernel_, context.mesh);
  const Shape& global = x_sharding.global_shape();
  if (global.size() < 2 || global.back() != kernel_sharding.global_shape()[0]) {
    throw ShapeError(str("Dense '", name(), "' was built for inputs whose last dimension is ",
                         kernel_sharding.global_shape()[0], ", got inputs laid out as ",
                         x_sharding.to_string(), " (a batch dimension first is needed)"));
  }
  const int last = static_cast<int>(global.size()) - 1;
  ShardedProjection projection{rules::Contraction::dense(last + 1), kernel_, bias_, {last}, path(),
                               activation_name_, &activation_, {}, {}, {}, {}};
  return sharded_projection(context, inputs, projection);
}

}  // namespace keras::layers
