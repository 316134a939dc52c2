// The 2-D image layers of Keras, channels_last: Conv2D, MaxPooling2D, AveragePooling2D and
// GlobalAveragePooling2D, with Keras' names, arguments, defaults and weight paths
// (conv2d/kernel of shape (kernel_height, kernel_width, channels / groups, filters),
// conv2d/bias). Under ModelParallel, Conv2D is a contraction over its input channels: a kernel
// laid out (None, None, None, "model") splits the filters (column-parallel, the output split
// by channels), and (None, None, "model", None) splits the input channels (row-parallel, the
// per-process sums all-reduced), the conv analogue of Megatron's column/row pair. Conv2D is
// written once, with ops: those forms are the conv op's rule at dispatch
// (docs/ARCHITECTURE.md, "Sharding at op dispatch").
#pragma once
#include <string>
#include <vector>

#include "layers/activations.h"
#include "layers/layer.h"

namespace keras::layers {

struct Conv2DOptions {
  std::vector<std::int64_t> strides{1};        // one entry (both axes) or (height, width)
  std::string padding = "valid";               // "valid" or "same"
  std::string data_format = "channels_last";   // "channels_first" is NotImplementedError
  std::vector<std::int64_t> dilation_rate{1};
  std::int64_t groups = 1;
  std::string activation{};                    // "" for none
  bool use_bias = true;
  initializers::InitializerPtr kernel_initializer{};  // default glorot_uniform
  initializers::InitializerPtr bias_initializer{};    // default zeros
  std::string name{};
};

class Conv2D : public LayerOf<Conv2D> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  Conv2D(std::int64_t filters, std::vector<std::int64_t> kernel_size, Conv2DOptions options = {});
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& inputs, bool training) override;
  std::string class_name() const override { return "Conv2D"; }
  const Tensor& kernel() const { return kernel_; }
  const Tensor& bias() const { return bias_; }

 private:
  std::int64_t filters_;
  std::vector<std::int64_t> kernel_size_;
  Conv2DOptions options_;
  activations::ActivationFn activation_;
  Tensor kernel_, bias_;
  std::int64_t channels_ = 0;  // the input channels it was built for
  Tensor convolve(const Tensor& inputs, const Tensor& kernel) const;
};

struct Pooling2DOptions {
  std::vector<std::int64_t> strides{};  // empty: pool_size, as Keras' strides=None
  std::string padding = "valid";
  std::string data_format = "channels_last";
  std::string name{};
};

class MaxPooling2D : public LayerOf<MaxPooling2D> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  explicit MaxPooling2D(std::vector<std::int64_t> pool_size = {2, 2}, Pooling2DOptions options = {});
  Tensor call(const Tensor& inputs, bool training) override;
  std::string class_name() const override { return "MaxPooling2D"; }

 private:
  std::vector<std::int64_t> pool_size_;
  Pooling2DOptions options_;
};

class AveragePooling2D : public LayerOf<AveragePooling2D> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  explicit AveragePooling2D(std::vector<std::int64_t> pool_size = {2, 2}, Pooling2DOptions options = {});
  Tensor call(const Tensor& inputs, bool training) override;
  std::string class_name() const override { return "AveragePooling2D"; }

 private:
  std::vector<std::int64_t> pool_size_;
  Pooling2DOptions options_;
};

// The mean over height and width: (batch, h, w, c) -> (batch, c), or (batch, 1, 1, c) with
// keepdims.
class GlobalAveragePooling2D : public LayerOf<GlobalAveragePooling2D> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  explicit GlobalAveragePooling2D(bool keepdims = false, const std::string& data_format = "channels_last",
                                  const std::string& name = "");
  Tensor call(const Tensor& inputs, bool training) override;
  std::string class_name() const override { return "GlobalAveragePooling2D"; }

 private:
  bool keepdims_;
};

}  // namespace keras::layers
