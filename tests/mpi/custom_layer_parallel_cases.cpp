// The model-parallel table's custom-layer rows: layers a user writes with add_weight and plain
// ops (no sharded code of their own) whose weights a LayoutMap splits. Each must train as on one
// process: the ops on their sharded weights follow a sharding rule or gather them first
// (docs/ARCHITECTURE.md, "Sharding at op dispatch"). Compared by model_parallel_tests.cpp.
#include "tests/mpi/model_parallel_table.h"

namespace keras::model_parallel_table {
namespace {

// The example: relu(x @ kernel + bias).
class Linear : public Layer {
 public:
  Linear(std::int64_t units, const std::string& name) : Layer("linear", name), units_(units) {}
  void build(const Shape& input_shape) override {
    kernel_ = add_weight("kernel", {input_shape.back(), units_}, initializers::glorot_uniform());
    bias_ = add_weight("bias", {units_}, initializers::get("glorot_uniform"));
  }
  Tensor call(const Tensor& x, bool) override { return ops::relu(ops::matmul(x, kernel_) + bias_); }

 private:
  std::int64_t units_;
  Tensor kernel_, bias_;
};

// Two products with a reshape and a transpose between them: (batch, 16) -> (batch, 4, 4),
// heads and head size swapped, back to (batch, 16), then the second product.
class HeadMixer : public Layer {
 public:
  HeadMixer() : Layer("head_mixer", "mixer") {}
  void build(const Shape& input_shape) override {
    up_ = add_weight("up", {input_shape.back(), 16}, initializers::glorot_uniform());
    down_ = add_weight("down", {16, 8}, initializers::glorot_uniform());
  }
  Tensor call(const Tensor& x, bool) override {
    // Written on whole shapes: h.shape() is (batch, 16) on any mesh, as one process sees it.
    Tensor h = ops::matmul(x, up_);
    const std::int64_t heads = 4, size = h.dim(1) / heads;
    Tensor grid = ops::reshape(h, {h.dim(0), heads, size});
    Tensor swapped = ops::reshape(ops::transpose(grid, {0, 2, 1}), {grid.dim(0), heads * size});
    return ops::tanh(ops::matmul(swapped, down_));
  }

 private:
  Tensor up_, down_;
};

// Two branches concatenated along the features.
class TwoBranches : public Layer {
 public:
  TwoBranches() : Layer("two_branches", "branches") {}
  void build(const Shape& input_shape) override {
    left_ = add_weight("left", {input_shape.back(), 8}, initializers::glorot_uniform());
    right_ = add_weight("right", {input_shape.back(), 8}, initializers::glorot_uniform());
  }
  Tensor call(const Tensor& x, bool) override {
    return ops::concatenate({ops::relu(ops::matmul(x, left_)), ops::tanh(ops::matmul(x, right_))}, -1);
  }

 private:
  Tensor left_, right_;
};

// A softmax over the axis the kernel splits, scaled back up so that the head sees unit-sized
// features.
class SoftmaxFeatures : public Layer {
 public:
  SoftmaxFeatures() : Layer("softmax_features", "gates") {}
  void build(const Shape& input_shape) override {
    kernel_ = add_weight("kernel", {input_shape.back(), 16}, initializers::glorot_uniform());
  }
  Tensor call(const Tensor& x, bool) override { return ops::softmax(ops::matmul(x, kernel_), -1) * 16.0; }

 private:
  Tensor kernel_;
};

// Ops whose rules cannot keep the splits they get: slices that cut the split axis (the rule makes
// it whole first), and a reshape whose split dimension is the inner one of its group (the
// transposed grid's), which no rule covers: gathered, and said.
class NoRule : public Layer {
 public:
  NoRule() : Layer("no_rule", "unruled") {}
  void build(const Shape& input_shape) override {
    kernel_ = add_weight("kernel", {input_shape.back(), 16}, initializers::glorot_uniform());
  }
  Tensor call(const Tensor& x, bool) override {
    Tensor h = ops::matmul(x, kernel_);  // (batch, 16), its columns split
    Tensor first = ops::slice(h, {0, 0}, {-1, 12});
    Tensor last = ops::slice(h, {0, 4}, {-1, 12});
    Tensor transposed = ops::transpose(ops::reshape(h, {-1, 4, 4}), {0, 2, 1});
    return ops::concatenate({ops::maximum(first, last), ops::reshape(transposed, {-1, 16})}, -1);
  }

 private:
  Tensor kernel_;
};

template <typename L>
std::function<std::shared_ptr<Model>()> then_head(std::function<L()> make) {
  return [make] {
    return std::make_shared<Sequential>(std::vector<AnyLayer>{make(), layers::Dense(4, "", named("head"))},
                                        "custom");
  };
}

}  // namespace

std::vector<Case> custom_layer_cases() {
  return {
      {"custom_layer_matmul_bias_relu", model_axis,
       [](kd::LayoutMap& map) {
         map[".*linear/kernel"] = {std::nullopt, "model"};
         map[".*linear/bias"] = {"model"};
       },
       then_head<Linear>([] { return Linear(16, "linear"); })},
      {"custom_layer_matmul_bias_relu_on_a_batch_by_model_mesh", batch_by_model,
       [](kd::LayoutMap& map) {
         map[".*linear/kernel"] = {std::nullopt, "model"};
         map[".*linear/bias"] = {"model"};
       },
       then_head<Linear>([] { return Linear(16, "linear"); })},
      {"custom_layer_replicated_bias_on_a_split_product", model_axis,
       // The bias is whole, the product split by columns: the element-wise rule cuts the bias to
       // the product's block and sums its gradient over the model axis.
       [](kd::LayoutMap& map) { map[".*linear/kernel"] = {std::nullopt, "model"}; },
       then_head<Linear>([] { return Linear(16, "linear"); })},
      {"custom_layer_row_split_kernel", model_axis,
       [](kd::LayoutMap& map) { map[".*linear/kernel"] = {"model", std::nullopt}; },
       [] {
         return std::make_shared<Sequential>(
             std::vector<AnyLayer>{layers::Dense(8, "relu", named("hidden")), Linear(16, "linear"),
                                   layers::Dense(4, "", named("head"))},
             "custom");
       }},
      {"custom_layer_reshape_transpose_between_products", model_axis,
       [](kd::LayoutMap& map) {
         map[".*mixer/up"] = {std::nullopt, "model"};
         map[".*mixer/down"] = {"model", std::nullopt};
       },
       then_head<HeadMixer>([] { return HeadMixer(); })},
      {"custom_layer_concatenate_of_sharded_branches", model_axis,
       [](kd::LayoutMap& map) {
         map[".*branches/left"] = {std::nullopt, "model"};
         map[".*branches/right"] = {std::nullopt, "model"};
       },
       then_head<TwoBranches>([] { return TwoBranches(); })},
      {"custom_layer_softmax_over_the_sharded_axis", model_axis,
       [](kd::LayoutMap& map) { map[".*gates/kernel"] = {std::nullopt, "model"}; },
       then_head<SoftmaxFeatures>([] { return SoftmaxFeatures(); })},
      {"custom_layer_with_no_rule", model_axis,
       [](kd::LayoutMap& map) { map[".*unruled/kernel"] = {std::nullopt, "model"}; },
       then_head<NoRule>([] { return NoRule(); })},
  };
}

}  // namespace keras::model_parallel_table
