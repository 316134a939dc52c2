// keras.layers.PReLU: max(0, x) + alpha * min(0, x), with a learned slope `alpha` per element of
// an input sample (shape input_shape[1:]), shared (size 1) along `shared_axes` as Keras does.
// Written once, with ops: under ModelParallel its alpha may be split like the activations it
// scales (a LayoutMap key ".*p_re_lu/alpha"), and the element-wise rule keeps both split with
// no communication (docs/CONTRIBUTING.md, "Adding a layer that shards": it is the recipe's
// example).
#pragma once
#include <string>
#include <vector>

#include "layers/layer.h"

namespace keras::layers {

struct PReLUOptions {
  initializers::InitializerPtr alpha_initializer = nullptr;  // default zeros, as Keras
  std::vector<int> shared_axes = {};               // axes of the input (1-based, batch 0 excluded)
  std::string name = "";
};

class PReLU : public LayerOf<PReLU> {
 public:
  explicit PReLU(PReLUOptions options = {});
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& inputs, bool training) override;
  std::string class_name() const override { return "PReLU"; }
  const Tensor& alpha() const { return alpha_; }

 private:
  PReLUOptions options_;
  Shape alpha_shape_;
  Tensor alpha_;
};

}  // namespace keras::layers
