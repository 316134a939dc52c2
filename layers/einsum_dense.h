// EinsumDense: y = activation(einsum(equation, x, kernel) + bias), Keras' layer of that name.
// The equation names x's, the kernel's and the output's dimensions ("abc,cde->abde" projects
// (batch, time, width) to (batch, time, heads, head_size)); the kernel's shape comes from x's
// dimensions and from output_shape (the output's shape without its batch dimension, -1 where
// x gives it, Keras' None); bias_axes names the output letters the bias spans. "..." may stand
// for leading dimensions ("...b,bc->...c"). Written once, with ops: under ModelParallel the
// kernel's layout picks the contraction rule at dispatch (column- or row-parallel, Megatron's
// pair for any kernel rank; docs/ARCHITECTURE.md, "Sharding at op dispatch").
#pragma once
#include "layers/activations.h"
#include "layers/layer.h"

namespace keras::layers {

struct EinsumDenseOptions {
  std::string activation;  // "" is linear
  std::string bias_axes;   // "" for no bias
  initializers::InitializerPtr kernel_initializer;  // default glorot_uniform
  initializers::InitializerPtr bias_initializer;    // default zeros
  std::string name;
};

class EinsumDense : public LayerOf<EinsumDense> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  EinsumDense(std::string equation, Shape output_shape, EinsumDenseOptions options = {});
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& inputs, bool training) override;
  const std::string& equation() const { return equation_; }
  const Tensor& kernel() const { return kernel_; }
  const Tensor& bias() const { return bias_; }
  // The output's full shape for inputs of `input_shape` (batch included).
  Shape compute_output_shape(const Shape& input_shape) const;

 private:
  // The equation with "..." replaced by letters for inputs of `rank`: x, kernel and output.
  struct Terms {
    std::string x, kernel, output;
  };
  Terms terms_for(int rank) const;

  std::string equation_;
  Shape output_shape_;
  EinsumDenseOptions options_;
  activations::ActivationFn activation_;
  std::string x_term_, kernel_term_, output_term_;  // as written, "..." kept
  bool elided_ = false;
  Tensor kernel_, bias_;
  Shape kernel_shape_;  // whole, however the kernel is split
};

}  // namespace keras::layers
