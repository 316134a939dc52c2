// Dense's and EinsumDense's sharded path (see the header).
#include "layers/sharded_projection.h"

#include "engine/ops.h"

namespace keras::layers {
namespace {

// `sharding` with each of `dims` replicated on every mesh axis (gathered before the product).
distribution::Sharding whole_along_all(distribution::Sharding sharding, const std::vector<int>& dims) {
  for (int dim : dims) sharding = distribution::sharding_rules::whole_along(sharding, dim);
  return sharding;
}

}  // namespace

Tensor sharded_projection(const distribution::ShardingContext& context, const Tensor& inputs,
                          const ShardedProjection& projection) {
  namespace rules = distribution::sharding_rules;
  using distribution::Sharding;
  const rules::Contraction& labels = projection.labels;
  Sharding x_sharding = context.activation_sharding(inputs);
  Sharding kernel_sharding = distribution::variable_sharding(projection.kernel, context.mesh);
  rules::OperationSharding product_rule =
      rules::contraction(labels, whole_along_all(x_sharding, projection.whole_input_dims),
                         whole_along_all(kernel_sharding, projection.whole_kernel_dims));
  if (!projection.output_shape.empty()) {
    product_rule.output = Sharding(context.mesh, product_rule.output.placements(), projection.output_shape);
  }
  Tensor x_local = context.operand(inputs, x_sharding, product_rule.inputs[0], product_rule.output);
  Tensor kernel_local =
      context.operand(projection.kernel, kernel_sharding, product_rule.inputs[1], product_rule.output);
  Tensor product = projection.product
                       ? projection.product(x_local, kernel_local)
                       : ops::einsum(labels.x + "," + labels.kernel + "->" + labels.output, x_local, kernel_local);
  product.set_annotation(nullptr);
  std::optional<Sharding> preferred;
  if (auto layout = context.active->get_tensor_layout(projection.layer_path + "/output")) {
    preferred = context.activation_target(*layout, product_rule.output,
                                          str("layer output '", projection.layer_path, "/output'"));
  }
  Sharding out_sharding = rules::resolved(product_rule.output, preferred ? &*preferred : nullptr);
  Tensor outputs = distribution::redistribute(product, product_rule.output, out_sharding);
  if (projection.bias.defined()) {
    Sharding bias_sharding = distribution::variable_sharding(projection.bias, context.mesh);
    rules::OperationSharding bias_rule = rules::broadcast(out_sharding, bias_sharding, projection.bias_dims);
    outputs = outputs + context.operand(projection.bias, bias_sharding, bias_rule.inputs[1], out_sharding);
  }
  outputs = distribution::with_sharding(outputs, out_sharding);
  const activations::ActivationFn& activation = *projection.activation;
  if (!activations::is_elementwise(projection.activation_name)) {
    Sharding whole = rules::whole_along(out_sharding, static_cast<int>(labels.output.size()) - 1);
    outputs = context.relayout(outputs, out_sharding, whole);
    return distribution::with_sharding(activation(outputs), whole);
  }
  return activation(outputs);
}

}  // namespace keras::layers
