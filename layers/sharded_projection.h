// The sharded path that Dense, EinsumDense and Conv2D share: a contraction of the input with a kernel
// by the contraction rule (column- or row-parallel per mesh axis, from the layouts), the
// Partial sums resolved into the layer's "<path>/output" layout when the LayoutMap has one (a
// reduce-scatter) or replicated (an all-reduce), the bias added once, after the sums, and the
// activation (a softmax first gets the whole of the last axis).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "distribution/sharded_tensor.h"
#include "distribution/sharding_rules.h"
#include "layers/activations.h"

namespace keras::layers {

struct ShardedProjection {
  distribution::sharding_rules::Contraction labels;  // input, kernel, output
  Tensor kernel;
  Tensor bias;                // undefined for none
  std::vector<int> bias_dims;  // the output dimensions the bias's dimensions line up with
  std::string layer_path;
  std::string activation_name;
  const activations::ActivationFn* activation = nullptr;
  // For a product the labels cannot spell (a convolution, whose windows span several rows of
  // the input): the local computation, the input's and kernel's dimensions that must be whole
  // first (the image's height and width, the window's), and the output's global shape.
  // Unset: the einsum of `labels`, nothing forced whole, the contraction's output shape.
  std::function<Tensor(const Tensor& x, const Tensor& kernel)> product;
  std::vector<int> whole_input_dims, whole_kernel_dims;
  Shape output_shape;
};

Tensor sharded_projection(const distribution::ShardingContext& context, const Tensor& inputs,
                          const ShardedProjection& projection);

}  // namespace keras::layers
