// Activation, Dropout, Flatten, Reshape, Embedding, LayerNormalization.
#include "layers/basic_layers.h"

#include "layers/layer_config.h"

#include "engine/errors.h"
#include "engine/ops.h"

namespace keras::layers {

Activation::Activation(const std::string& activation, const std::string& name)
    : LayerOf("activation", name), activation_(activations::get(activation)),
      activation_name_(activation), elementwise_(activations::is_elementwise(activation)) {}

Tensor Activation::call(const Tensor& inputs, bool) { return activation_(inputs); }

Dropout::Dropout(double rate, std::optional<std::uint64_t> seed, const std::string& name)
    : LayerOf("dropout", name), rate_(rate), seed_(seed ? *seed : next_random_seed()) {
  if (!(rate >= 0.0 && rate < 1.0)) {
    throw ValueError(str("Dropout: rate must be in [0, 1), got ", rate));
  }
}

void Dropout::set_random_counters(const std::vector<std::uint64_t>& counters) {
  if (counters.size() != 1) {
    throw ValueError(str("Dropout '", path(), "' keeps 1 random counter (its call count), got ",
                         counters.size()));
  }
  calls_ = counters[0];
}

Tensor Dropout::call(const Tensor& inputs, bool training) {
  if (!training || rate_ == 0.0) return inputs;
  // A fresh Philox key per call, derived from the layer seed: reproducible, never repeating.
  // Under a distribution each process draws its block of the one-process mask (ops::dropout).
  return ops::dropout(inputs, rate_, seed_ + 0x9E3779B97F4A7C15ull * ++calls_);
}

Flatten::Flatten(const std::string& name) : LayerOf("flatten", name) {}

Tensor Flatten::call(const Tensor& inputs, bool) {
  if (inputs.rank() == 0) throw ShapeError("Flatten needs inputs with a batch axis, got a scalar");
  return ops::reshape(inputs, {inputs.dim(0), inputs.rank() == 1 ? 1 : -1});
}

Reshape::Reshape(Shape target_shape, const std::string& name)
    : LayerOf("reshape", name), target_shape_(std::move(target_shape)) {
  int unknown = 0;
  for (std::int64_t dim : target_shape_) {
    if (dim == -1) ++unknown;
    if (dim < -1 || dim == 0) {
      throw ValueError(str("Reshape: target shape ", shape_to_string(target_shape_),
                           " must contain positive dimensions (and at most one -1)"));
    }
  }
  if (unknown > 1) {
    throw ValueError(str("Reshape: target shape ", shape_to_string(target_shape_),
                         " has more than one -1"));
  }
}

Tensor Reshape::call(const Tensor& inputs, bool) {
  if (inputs.rank() == 0) throw ShapeError("Reshape needs inputs with a batch axis, got a scalar");
  Shape shape = {inputs.dim(0)};
  shape.insert(shape.end(), target_shape_.begin(), target_shape_.end());
  return ops::reshape(inputs, shape);
}

Embedding::Embedding(std::int64_t input_dim, std::int64_t output_dim,
                     initializers::InitializerPtr embeddings_initializer, const std::string& name)
    : LayerOf("embedding", name), input_dim_(input_dim), output_dim_(output_dim),
      initializer_(embeddings_initializer ? std::move(embeddings_initializer)
                                          : initializers::get("uniform")) {
  if (input_dim <= 0 || output_dim <= 0) {
    throw ValueError(str("Embedding: input_dim and output_dim must be positive, got ", input_dim,
                         " and ", output_dim));
  }
}

void Embedding::build(const Shape&) {
  embeddings_ = add_weight("embeddings", {input_dim_, output_dim_}, initializer_);
}

Tensor Embedding::call(const Tensor& inputs, bool) {
  if (inputs.dtype() != int32 && inputs.dtype() != int64) {
    throw DTypeError(str("Embedding '", name(), "' expects int32 or int64 indices, got ",
                         dtype_name(inputs.dtype())));
  }
  ops::check_indices(inputs, 0, input_dim_,
                     str("Embedding '", name(), "': index {} is out of range; expected indices in [0, ",
                         input_dim_, ")"));
  // Under ModelParallel the table's split is the lookup rule's (take at dispatch).
  return ops::take(embeddings_, inputs, 0);
}

LayerNormalization::LayerNormalization(double epsilon, bool center, bool scale,
                                       const std::string& name)
    : LayerOf("layer_normalization", name), epsilon_(epsilon), center_(center), scale_(scale) {
  set_autocast(false);  // statistics in float32 under mixed policies, as Keras' (see call)
  if (!(epsilon > 0)) throw ValueError(str("LayerNormalization: epsilon must be > 0, got ", epsilon));
}

void LayerNormalization::build(const Shape& input_shape) {
  if (input_shape.empty()) throw ShapeError("LayerNormalization needs inputs of rank >= 1");
  width_ = input_shape.back();
  if (scale_) gamma_ = add_weight("gamma", {input_shape.back()}, initializers::ones());
  if (center_) beta_ = add_weight("beta", {input_shape.back()}, initializers::zeros());
}

Tensor LayerNormalization::call(const Tensor& inputs_in, bool) {
  const Shape& shape = inputs_in.shape();  // global: the layer is written once, on whole tensors
  if (shape.empty() || shape.back() != width_) {
    throw ShapeError(str("LayerNormalization '", name(), "' was built for a last dimension of ", width_,
                         ", got inputs of shape ", shape_to_string(shape)));
  }
  // Computes in the weights' dtype (float32 under mixed policies too, as Keras' does), whatever
  // the input dtype; the output is in the compute dtype. One fused op where the input is already
  // in the compute dtype (engine/ops/normalization.cpp): it reads 16-bit inputs as they are.
  const DType statistics_dtype = is_half_precision(inputs_in.dtype()) ? float32 : inputs_in.dtype();
  if (inputs_in.dtype() == compute_dtype() && statistics_dtype == variable_dtype()) {
    return ops::fused_layer_normalization(inputs_in, gamma_, beta_, epsilon_);
  }
  Tensor inputs = inputs_in.dtype() == variable_dtype() ? inputs_in : ops::cast(inputs_in, variable_dtype());
  // Under ModelParallel with the features split, the row statistics are each process's sums
  // summed (the reduction rule), and the normalisation stays split (the fused op composes these
  // same ops for split operands).
  Tensor mean = ops::mean(inputs, {-1}, /*keepdims=*/true);
  Tensor centered = inputs - mean;
  Tensor variance = ops::mean(ops::square(centered), {-1}, /*keepdims=*/true);
  Tensor outputs = centered * ops::rsqrt(variance + epsilon_);
  if (gamma_.defined()) outputs = outputs * gamma_;
  if (beta_.defined()) outputs = outputs + beta_;
  return ops::cast(outputs, compute_dtype());
}

}  // namespace keras::layers

namespace keras::layers {

Softmax::Softmax(std::int64_t axis, const std::string& name) : LayerOf("softmax", name), axis_(axis) {}

Tensor Softmax::call(const Tensor& inputs, bool) { return ops::softmax(inputs, axis_); }

Tensor Softmax::operator()(const Tensor& inputs, const Tensor& mask) {
  return run_call([&] { return masked_softmax(inputs, mask, axis_); });
}

Tensor Softmax::masked_softmax(const Tensor& inputs, const Tensor& mask_in, std::int64_t axis) {
  if (!mask_in.defined()) return ops::softmax(inputs, axis);
  const Shape& shape = inputs.shape();
  const Shape& mask_shape = mask_in.shape();
  bool fits = mask_shape.size() <= shape.size();
  for (std::size_t i = 1; fits && i <= mask_shape.size(); ++i) {
    std::int64_t m = mask_shape[mask_shape.size() - i], d = shape[shape.size() - i];
    fits = m == 1 || m == d;
  }
  if (!fits) {
    throw ShapeError(str("Softmax: the mask must be broadcastable to the inputs and have no more "
                         "dimensions; each mask dimension must be 1 or match the input's. Received: "
                         "inputs.shape=", shape_to_string(shape), ", mask.shape=", shape_to_string(mask_shape)));
  }
  Tensor mask = mask_in.to(inputs.device());
  if (mask.dtype() != DType::bool_) mask = ops::greater(mask, ops::scalar_like(mask, 0.5));
  Tensor masked = ops::where(mask, inputs, ops::scalar_like(inputs, -1e9));
  return ops::where(mask, ops::softmax(masked, axis), ops::scalar_like(inputs, 0.0));
}

ReLU::ReLU(ReLUOptions options) : LayerOf("re_lu", options.name), options_(std::move(options)) {
  if (options_.max_value && !(*options_.max_value >= 0.0)) {
    throw ValueError(str("ReLU: max_value must be >= 0, got ", *options_.max_value));
  }
  if (!(options_.negative_slope >= 0.0)) {
    throw ValueError(str("ReLU: negative_slope must be >= 0, got ", options_.negative_slope));
  }
}

Tensor ReLU::call(const Tensor& inputs, bool) {
  if (!options_.max_value && options_.negative_slope == 0.0 && options_.threshold == 0.0) {
    return ops::relu(inputs);
  }
  Tensor threshold = ops::scalar_like(inputs, options_.threshold);
  Tensor outputs = ops::where(ops::greater_equal(inputs, threshold), inputs,
                              (inputs - threshold) * options_.negative_slope);
  if (options_.max_value) outputs = ops::minimum(outputs, ops::scalar_like(inputs, *options_.max_value));
  return outputs;
}

Rescaling::Rescaling(double scale, double offset, const std::string& name)
    : LayerOf("rescaling", name), scale_(scale), offset_(offset) {}

Tensor Rescaling::call(const Tensor& inputs, bool) {
  Tensor x = is_floating(inputs.dtype()) ? inputs : ops::cast(inputs, compute_dtype());
  return offset_ == 0.0 ? x * scale_ : x * scale_ + offset_;
}

RMSNormalization::RMSNormalization(double epsilon, const std::string& name)
    : LayerOf("rms_normalization", name), epsilon_(epsilon) {
  set_autocast(false);  // statistics in float32 under mixed policies (see call)
  if (!(epsilon > 0)) throw ValueError(str("RMSNormalization: epsilon must be > 0, got ", epsilon));
}

void RMSNormalization::build(const Shape& input_shape) {
  if (input_shape.empty()) throw ShapeError("RMSNormalization needs inputs of rank >= 1");
  width_ = input_shape.back();
  scale_ = add_weight("scale", {input_shape.back()}, initializers::ones());
}

Tensor RMSNormalization::call(const Tensor& inputs_in, bool) {
  Tensor inputs = inputs_in.dtype() == scale_.dtype() ? inputs_in : ops::cast(inputs_in, scale_.dtype());
  if (inputs.rank() == 0 || inputs.shape().back() != width_) {
    throw ShapeError(str("RMSNormalization '", name(), "' was built for a last dimension of ", width_,
                         ", got inputs of shape ", shape_to_string(inputs.shape())));
  }
  Tensor mean_square = ops::mean(ops::square(inputs), {-1}, /*keepdims=*/true);
  return ops::cast(inputs * ops::rsqrt(mean_square + epsilon_) * scale_, compute_dtype());
}

}  // namespace keras::layers

namespace keras::layers {

PositionEmbedding::PositionEmbedding(std::int64_t sequence_length, initializers::InitializerPtr initializer,
                                     const std::string& name)
    : LayerOf("position_embedding", name),
      sequence_length_(sequence_length),
      initializer_(initializer ? std::move(initializer) : initializers::glorot_uniform()) {
  if (sequence_length <= 0) {
    throw ValueError(str("PositionEmbedding: sequence_length must be positive, got ", sequence_length));
  }
}

void PositionEmbedding::build(const Shape& input_shape) {
  if (input_shape.size() < 2) {
    throw ShapeError(str("PositionEmbedding '", name(), "' needs inputs of shape (batch, sequence, features), got ",
                         shape_to_string(input_shape)));
  }
  embeddings_ = add_weight("embeddings", {sequence_length_, input_shape.back()}, initializer_);
}

Tensor PositionEmbedding::call(const Tensor& inputs, bool) {
  if (inputs.rank() < 2 || inputs.shape().back() != embeddings_.dim(1) ||
      inputs.dim(inputs.rank() - 2) > sequence_length_) {
    throw ShapeError(str("PositionEmbedding '", name(), "' holds ", sequence_length_, " positions of ",
                         embeddings_.dim(1), " features; got inputs of shape ", shape_to_string(inputs.shape()),
                         " (expected (batch, at most ", sequence_length_, ", ", embeddings_.dim(1), "))"));
  }
  const std::int64_t length = inputs.dim(inputs.rank() - 2);
  Tensor positions = ops::slice(embeddings_, {0, 0}, {length, embeddings_.dim(1)});
  return ops::broadcast_to(positions, inputs.shape());
}


nlohmann::json Activation::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["activation"] = config_json::activation(activation_name_);
  return config;
}

LayerPtr Activation::from_config(LayerConfig& config) {
  std::string name = config.name();
  return std::make_shared<Activation>(config.activation("activation"), name);
}


nlohmann::json ReLU::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["max_value"] = options_.max_value ? nlohmann::json(*options_.max_value) : nlohmann::json();
  config["negative_slope"] = options_.negative_slope;
  config["threshold"] = options_.threshold;
  return config;
}

LayerPtr ReLU::from_config(LayerConfig& config) {
  ReLUOptions options;
  options.name = config.name();
  if (std::optional<nlohmann::json> max_value = config.take("max_value")) {
    if (!max_value->is_number()) config.malformed("max_value", "a number or null");
    options.max_value = max_value->get<double>();
  }
  options.negative_slope = config.number("negative_slope", 0.0);
  options.threshold = config.number("threshold", 0.0);
  return std::make_shared<ReLU>(options);
}


nlohmann::json Rescaling::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["scale"] = scale_;
  config["offset"] = offset_;
  return config;
}

LayerPtr Rescaling::from_config(LayerConfig& config) {
  std::string name = config.name();
  double scale = config.number("scale");
  return std::make_shared<Rescaling>(scale, config.number("offset", 0.0), name);
}


nlohmann::json Softmax::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["axis"] = axis_;
  return config;
}

LayerPtr Softmax::from_config(LayerConfig& config) {
  std::string name = config.name();
  std::vector<std::int64_t> axis = config.integers("axis", std::vector<std::int64_t>{-1});
  if (axis.size() != 1) config.unsupported("axis", "names several axes; keras-cpp's Softmax takes one");
  return std::make_shared<Softmax>(axis[0], name);
}


nlohmann::json Dropout::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["rate"] = rate_;
  // Null, as Keras writes an unseeded Dropout's: our 64-bit seed (drawn when none was given) is
  // not one JAX's keys take, and a saved model is for inference or training afresh.
  config["seed"] = nullptr;
  config["noise_shape"] = nullptr;
  return config;
}

LayerPtr Dropout::from_config(LayerConfig& config) {
  std::string name = config.name();
  double rate = config.number("rate");
  std::optional<std::uint64_t> seed;
  if (std::optional<nlohmann::json> given = config.take("seed")) {
    if (!given->is_number_unsigned()) config.malformed("seed", "an integer (0 or more) or null");
    seed = given->get<std::uint64_t>();
  }
  config.only("noise_shape");
  return std::make_shared<Dropout>(rate, seed, name);
}


nlohmann::json Flatten::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["data_format"] = "channels_last";
  return config;
}

LayerPtr Flatten::from_config(LayerConfig& config) {
  std::string name = config.name();
  config.only("data_format", {"channels_last"});
  return std::make_shared<Flatten>(name);
}


nlohmann::json Reshape::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["target_shape"] = target_shape_;
  return config;
}

LayerPtr Reshape::from_config(LayerConfig& config) {
  std::string name = config.name();
  std::vector<std::int64_t> target = config.integers("target_shape");
  return std::make_shared<Reshape>(Shape(target.begin(), target.end()), name);
}


nlohmann::json Embedding::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["input_dim"] = input_dim_;
  config["output_dim"] = output_dim_;
  config["embeddings_initializer"] = config_json::initializer(initializer_, "random_uniform");
  for (const char* key : {"embeddings_regularizer", "activity_regularizer", "embeddings_constraint"}) config[key] = nullptr;
  config["mask_zero"] = false;
  return config;
}

LayerPtr Embedding::from_config(LayerConfig& config) {
  std::string name = config.name();
  std::int64_t input_dim = config.integer("input_dim");
  std::int64_t output_dim = config.integer("output_dim");
  initializers::InitializerPtr initializer = config.initializer("embeddings_initializer");
  for (const char* key : {"embeddings_regularizer", "activity_regularizer", "embeddings_constraint", "quantization_config", "lora_rank", "lora_alpha", "input_length", "sparse"}) config.only(key);
  config.only("mask_zero", {false});
  return std::make_shared<Embedding>(input_dim, output_dim, initializer, name);
}


namespace {
// An initializer field keras-cpp supports only at Keras' default for the layer.
void only_initializer(LayerConfig& config, const char* key, const char* expected) {
  std::optional<nlohmann::json> given = config.take(key);
  if (!given) return;
  std::string name = given->is_string() ? given->get<std::string>()
                     : given->is_object() && given->value("class_name", nlohmann::json()).is_string()
                         ? to_snake_case((*given)["class_name"].get<std::string>())
                         : std::string();
  if (name != expected) config.unsupported(key, str("must be '", expected, "' here (keras-cpp's ", config.class_name(), " starts its weights so)"));
}
}  // namespace

nlohmann::json LayerNormalization::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["axis"] = -1;
  config["epsilon"] = epsilon_;
  config["center"] = center_;
  config["scale"] = scale_;
  config["rms_scaling"] = false;
  config["beta_initializer"] = config_json::initializer(nullptr, "zeros");
  config["gamma_initializer"] = config_json::initializer(nullptr, "ones");
  for (const char* key : {"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"}) config[key] = nullptr;
  return config;
}

LayerPtr LayerNormalization::from_config(LayerConfig& config) {
  std::string name = config.name();
  std::vector<std::int64_t> axis = config.integers("axis", std::vector<std::int64_t>{-1});
  if (axis != std::vector<std::int64_t>{-1}) config.unsupported("axis", "must be -1 (the last axis) in keras-cpp");
  double epsilon = config.number("epsilon", 1e-3);
  bool center = config.boolean("center", true);
  bool scale = config.boolean("scale", true);
  config.only("rms_scaling", {false});
  only_initializer(config, "beta_initializer", "zeros");
  only_initializer(config, "gamma_initializer", "ones");
  for (const char* key : {"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"}) config.only(key);
  return std::make_shared<LayerNormalization>(epsilon, center, scale, name);
}


nlohmann::json RMSNormalization::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["axis"] = -1;
  config["epsilon"] = epsilon_;
  return config;
}

LayerPtr RMSNormalization::from_config(LayerConfig& config) {
  std::string name = config.name();
  std::vector<std::int64_t> axis = config.integers("axis", std::vector<std::int64_t>{-1});
  if (axis != std::vector<std::int64_t>{-1}) config.unsupported("axis", "must be -1 (the last axis) in keras-cpp");
  return std::make_shared<RMSNormalization>(config.number("epsilon", 1e-6), name);
}

}  // namespace keras::layers
