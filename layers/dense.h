// Dense: y = activation(x @ kernel + bias), kernel (input_dim, units), Keras defaults
// (glorot_uniform kernel, zeros bias).
#pragma once
#include "layers/activations.h"
#include "distribution/sharded_tensor.h"
#include "layers/layer.h"

namespace keras::layers {

struct DenseOptions {
  bool use_bias = true;
  initializers::InitializerPtr kernel_initializer;  // default glorot_uniform
  initializers::InitializerPtr bias_initializer;    // default zeros
  std::string name;
};

class Dense : public Layer {
 public:
  explicit Dense(std::int64_t units, const std::string& activation = "",
                 DenseOptions options = {});
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& inputs, bool training) override;
  bool accepts_sharded_inputs() const override { return true; }
  std::int64_t units() const { return units_; }
  const Tensor& kernel() const { return kernel_; }
  const Tensor& bias() const { return bias_; }

 private:
  std::int64_t units_;
  std::string activation_name_;
  activations::ActivationFn activation_;
  DenseOptions options_;
  Tensor kernel_, bias_;
  // Under ModelParallel: the contraction by the sharded rule, the bias added once.
  Tensor call_sharded(const distribution::ShardingContext& context, const Tensor& inputs);
};

}  // namespace keras::layers
