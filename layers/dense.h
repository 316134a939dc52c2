// Dense: y = activation(x @ kernel + bias), kernel (input_dim, units), Keras defaults
// (glorot_uniform kernel, zeros bias). Written once, with ops: under ModelParallel its kernel's
// and bias's splits are followed by the ops' rules (column- or row-parallel from the contraction
// rule, the bias cut to the product's blocks), docs/ARCHITECTURE.md "Sharding at op dispatch".
#pragma once
#include "layers/activations.h"
#include "layers/layer.h"

namespace keras::layers {

struct DenseOptions {
  bool use_bias = true;
  initializers::InitializerPtr kernel_initializer = nullptr;  // default glorot_uniform
  initializers::InitializerPtr bias_initializer = nullptr;    // default zeros
  std::string name = "";
};

class Dense : public LayerOf<Dense> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  explicit Dense(std::int64_t units, const std::string& activation = "",
                 DenseOptions options = {});
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& inputs, bool training) override;
  std::int64_t units() const { return units_; }
  const Tensor& kernel() const { return kernel_; }
  const Tensor& bias() const { return bias_; }

 private:
  std::int64_t units_;
  std::string activation_name_;
  activations::ActivationFn activation_;
  DenseOptions options_;
  Tensor kernel_, bias_;
  std::int64_t input_dim_ = 0;
};

}  // namespace keras::layers
