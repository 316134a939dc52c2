// Conv2D and the pooling layers (see the header).
#include "layers/convolution_layers.h"

#include "layers/layer_config.h"

#include <cctype>

#include "engine/errors.h"
#include "engine/ops.h"
#include "engine/window_geometry.h"

namespace keras::layers {
namespace {

void refuse_channels_first(const std::string& data_format, const char* layer) {
  if (data_format == "channels_last") return;
  if (data_format == "channels_first") {
    throw NotImplementedError(str(layer, ": data_format \"channels_first\" is not supported; keras-cpp's image "
                                  "layers are channels_last (batch, height, width, channels)"));
  }
  throw ValueError(str(layer, ": data_format must be \"channels_last\" or \"channels_first\", got \"",
                       data_format, "\""));
}

std::string lowered(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

Conv2D::Conv2D(std::int64_t filters, std::vector<std::int64_t> kernel_size, Conv2DOptions options)
    : LayerOf("conv2d", options.name), filters_(filters), options_(std::move(options)),
      activation_(activations::get(options_.activation)) {
  refuse_channels_first(options_.data_format, "Conv2D");
  if (filters <= 0) throw ValueError(str("Conv2D: filters must be a positive integer, got ", filters));
  if (options_.groups <= 0) throw ValueError(str("Conv2D: groups must be a positive integer, got ", options_.groups));
  if (filters % options_.groups != 0) {
    throw ValueError(str("Conv2D: filters (", filters, ") must be divisible by groups (", options_.groups, ")"));
  }
  kernel_size_ = window_pair(kernel_size, "Conv2D", "kernel_size");
  std::vector<std::int64_t> strides = window_pair(options_.strides, "Conv2D", "strides");
  std::vector<std::int64_t> dilation = window_pair(options_.dilation_rate, "Conv2D", "dilation_rate");
  options_.padding = lowered(options_.padding);
  parse_window_padding(options_.padding, "Conv2D");
  if ((strides[0] > 1 || strides[1] > 1) && (dilation[0] > 1 || dilation[1] > 1)) {
    throw ValueError(str("Conv2D: strides > 1 are not supported together with dilation_rate > 1 (as in Keras); "
                         "got strides (", strides[0], ", ", strides[1], ") and dilation_rate (", dilation[0], ", ",
                         dilation[1], ")"));
  }
  if (!options_.kernel_initializer) options_.kernel_initializer = initializers::glorot_uniform();
  if (!options_.bias_initializer) options_.bias_initializer = initializers::zeros();
}

void Conv2D::build(const Shape& input_shape) {
  if (input_shape.size() != 4) {
    throw ShapeError(str("Conv2D '", name(), "' expects channels_last inputs (batch, height, width, channels), got "
                         "shape ", shape_to_string(input_shape)));
  }
  std::int64_t channels = input_shape[3];
  channels_ = channels;
  if (channels % options_.groups != 0) {
    throw ValueError(str("Conv2D '", name(), "': the input's ", channels, " channels (shape ",
                         shape_to_string(input_shape), ") are not divisible by groups (", options_.groups, ")"));
  }
  kernel_ = add_weight("kernel", {kernel_size_[0], kernel_size_[1], channels / options_.groups, filters_},
                       options_.kernel_initializer);
  if (options_.use_bias) bias_ = add_weight("bias", {filters_}, options_.bias_initializer);
}

Tensor Conv2D::convolve(const Tensor& inputs, const Tensor& kernel) const {
  // In the compute dtype: the kernel is read in it too (autocast, layers/dtype_policy.h).
  return ops::conv(inputs.dtype() == compute_dtype() ? inputs : ops::cast(inputs, compute_dtype()), kernel,
                   options_.strides, options_.padding, "channels_last", options_.dilation_rate);
}

Tensor Conv2D::call(const Tensor& inputs, bool) {
  const Shape& shape = inputs.shape();  // global: the layer is written once, on whole tensors
  if (shape.size() != 4 || shape[3] != channels_) {
    throw ShapeError(str("Conv2D '", name(), "' was built for channels_last inputs with ", channels_,
                         " channels, got inputs of shape ", shape_to_string(shape)));
  }
  Tensor outputs = convolve(inputs, kernel_);
  if (bias_.defined()) outputs = outputs + bias_;
  return activation_(outputs);
}

MaxPooling2D::MaxPooling2D(std::vector<std::int64_t> pool_size, Pooling2DOptions options)
    : LayerOf("max_pooling2d", options.name), pool_size_(window_pair(pool_size, "MaxPooling2D", "pool_size")),
      options_(std::move(options)) {
  refuse_channels_first(options_.data_format, "MaxPooling2D");
  if (!options_.strides.empty()) window_pair(options_.strides, "MaxPooling2D", "strides");
  parse_window_padding(options_.padding, "MaxPooling2D");
}

Tensor MaxPooling2D::call(const Tensor& inputs, bool) {
  return ops::max_pool(inputs, pool_size_, options_.strides, options_.padding);
}

AveragePooling2D::AveragePooling2D(std::vector<std::int64_t> pool_size, Pooling2DOptions options)
    : LayerOf("average_pooling2d", options.name),
      pool_size_(window_pair(pool_size, "AveragePooling2D", "pool_size")), options_(std::move(options)) {
  refuse_channels_first(options_.data_format, "AveragePooling2D");
  if (!options_.strides.empty()) window_pair(options_.strides, "AveragePooling2D", "strides");
  parse_window_padding(options_.padding, "AveragePooling2D");
}

Tensor AveragePooling2D::call(const Tensor& inputs, bool) {
  return ops::average_pool(inputs, pool_size_, options_.strides, options_.padding);
}

GlobalAveragePooling2D::GlobalAveragePooling2D(bool keepdims, const std::string& data_format,
                                               const std::string& name)
    : LayerOf("global_average_pooling2d", name), keepdims_(keepdims) {
  refuse_channels_first(data_format, "GlobalAveragePooling2D");
}

Tensor GlobalAveragePooling2D::call(const Tensor& inputs, bool) {
  if (inputs.rank() != 4) {
    throw ShapeError(str("GlobalAveragePooling2D '", name(), "' expects channels_last inputs (batch, height, width, "
                         "channels), got shape ", shape_to_string(inputs.shape())));
  }
  return ops::mean(inputs, {1, 2}, keepdims_);
}


namespace {
nlohmann::json pair_of(const std::vector<std::int64_t>& values) {
  return values.size() == 1 ? nlohmann::json{values[0], values[0]} : nlohmann::json(values);
}
}  // namespace

nlohmann::json Conv2D::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["filters"] = filters_;
  config["kernel_size"] = pair_of(kernel_size_);
  config["strides"] = pair_of(options_.strides);
  config["padding"] = options_.padding;
  config["data_format"] = options_.data_format;
  config["dilation_rate"] = pair_of(options_.dilation_rate);
  config["groups"] = options_.groups;
  config["activation"] = config_json::activation(options_.activation);
  config["use_bias"] = options_.use_bias;
  config["kernel_initializer"] = config_json::initializer(options_.kernel_initializer, "glorot_uniform");
  config["bias_initializer"] = config_json::initializer(options_.bias_initializer, "zeros");
  for (const char* key : {"kernel_regularizer", "bias_regularizer", "kernel_constraint", "bias_constraint", "activity_regularizer"}) config[key] = nullptr;
  return config;
}

LayerPtr Conv2D::from_config(LayerConfig& config) {
  Conv2DOptions options;
  options.name = config.name();
  std::int64_t filters = config.integer("filters");
  std::vector<std::int64_t> kernel_size = config.integers("kernel_size");
  options.strides = config.integers("strides", std::vector<std::int64_t>{1});
  options.padding = config.string("padding", "valid");
  options.data_format = config.string("data_format", "channels_last");
  options.dilation_rate = config.integers("dilation_rate", std::vector<std::int64_t>{1});
  options.groups = config.integer("groups", 1);
  options.activation = config.activation("activation");
  options.use_bias = config.boolean("use_bias", true);
  options.kernel_initializer = config.initializer("kernel_initializer");
  options.bias_initializer = config.initializer("bias_initializer");
  for (const char* key : {"kernel_regularizer", "bias_regularizer", "kernel_constraint", "bias_constraint", "activity_regularizer"}) config.only(key);
  return std::make_shared<Conv2D>(filters, kernel_size, options);
}


namespace {
// MaxPooling2D's and AveragePooling2D's config: the same fields, Keras' Pooling2D's.
nlohmann::json pooling_config(nlohmann::json config, const std::vector<std::int64_t>& pool_size,
                              const Pooling2DOptions& options) {
  config["pool_size"] = pair_of(pool_size);
  config["padding"] = options.padding;
  config["strides"] = pair_of(options.strides.empty() ? pool_size : options.strides);
  config["data_format"] = options.data_format;
  return config;
}

template <typename Pooling>
LayerPtr pooling_from_config(LayerConfig& config) {
  Pooling2DOptions options;
  options.name = config.name();
  std::vector<std::int64_t> pool_size = config.integers("pool_size", std::vector<std::int64_t>{2, 2});
  options.padding = config.string("padding", "valid");
  options.strides = config.integers("strides", std::vector<std::int64_t>{});
  options.data_format = config.string("data_format", "channels_last");
  return std::make_shared<Pooling>(pool_size, options);
}
}  // namespace

nlohmann::json MaxPooling2D::get_config() const { return pooling_config(Layer::get_config(), pool_size_, options_); }
LayerPtr MaxPooling2D::from_config(LayerConfig& config) { return pooling_from_config<MaxPooling2D>(config); }

nlohmann::json AveragePooling2D::get_config() const {
  return pooling_config(Layer::get_config(), pool_size_, options_);
}
LayerPtr AveragePooling2D::from_config(LayerConfig& config) { return pooling_from_config<AveragePooling2D>(config); }

nlohmann::json GlobalAveragePooling2D::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["data_format"] = "channels_last";
  config["keepdims"] = keepdims_;
  return config;
}

LayerPtr GlobalAveragePooling2D::from_config(LayerConfig& config) {
  std::string name = config.name();
  std::string data_format = config.string("data_format", "channels_last");
  return std::make_shared<GlobalAveragePooling2D>(config.boolean("keepdims", false), data_format, name);
}

}  // namespace keras::layers
