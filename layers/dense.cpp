// Dense layer.
#include "layers/dense.h"

#include "layers/layer_config.h"

#include "engine/errors.h"
#include "engine/ops.h"

namespace keras::layers {

Dense::Dense(std::int64_t units, const std::string& activation, DenseOptions options)
    : LayerOf("dense", options.name), units_(units), activation_name_(activation),
      activation_(activations::get(activation)), options_(std::move(options)) {
  if (units <= 0) throw ValueError(str("Dense: units must be a positive integer, got ", units));
  if (!options_.kernel_initializer) options_.kernel_initializer = initializers::glorot_uniform();
  if (!options_.bias_initializer) options_.bias_initializer = initializers::zeros();
}

void Dense::build(const Shape& input_shape) {
  if (input_shape.empty()) {
    throw ShapeError(str("Dense '", name(), "' needs inputs of rank >= 1, got a scalar"));
  }
  input_dim_ = input_shape.back();
  kernel_ = add_weight("kernel", {input_dim_, units_}, options_.kernel_initializer);
  if (options_.use_bias) bias_ = add_weight("bias", {units_}, options_.bias_initializer);
}

Tensor Dense::call(const Tensor& inputs, bool) {
  const Shape& shape = inputs.shape();  // global: the layer is written once, on whole tensors
  if (shape.size() < 2 || shape.back() != input_dim_) {
    throw ShapeError(str("Dense '", name(), "' was built for inputs whose last dimension is ", input_dim_,
                         ", got inputs of shape ", shape_to_string(shape),
                         shape.size() < 2 ? " (a batch dimension first is needed)" : ""));
  }
  // In the compute dtype: the kernel is read in it too (autocast, layers/dtype_policy.h).
  Tensor outputs = ops::matmul(inputs.dtype() == compute_dtype() ? inputs : ops::cast(inputs, compute_dtype()),
                               kernel_);
  if (bias_.defined()) outputs = outputs + bias_;
  return activation_(outputs);
}


nlohmann::json Dense::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["units"] = units_;
  config["activation"] = config_json::activation(activation_name_);
  config["use_bias"] = options_.use_bias;
  config["kernel_initializer"] = config_json::initializer(options_.kernel_initializer, "glorot_uniform");
  config["bias_initializer"] = config_json::initializer(options_.bias_initializer, "zeros");
  for (const char* key : {"kernel_regularizer", "bias_regularizer", "kernel_constraint", "bias_constraint"}) config[key] = nullptr;
  return config;
}

LayerPtr Dense::from_config(LayerConfig& config) {
  DenseOptions options;
  options.name = config.name();
  std::int64_t units = config.integer("units");
  std::string activation = config.activation("activation");
  options.use_bias = config.boolean("use_bias", true);
  options.kernel_initializer = config.initializer("kernel_initializer");
  options.bias_initializer = config.initializer("bias_initializer");
  for (const char* key : {"kernel_regularizer", "bias_regularizer", "kernel_constraint", "bias_constraint", "activity_regularizer", "quantization_config", "lora_rank", "lora_alpha"}) config.only(key);
  return std::make_shared<Dense>(units, activation, options);
}

}  // namespace keras::layers
