// Keras' merging layers, which take a list of tensors: Add, Subtract, Multiply, Average,
// Maximum, Minimum (element-wise, with numpy broadcasting), Concatenate (along an axis) and Dot
// (Keras' batch_dot). Each is a Merge: called on a vector of tensors, or of KerasTensors in a
// functional graph (layers/keras_tensor.h). Their ops follow the sharding rules like any
// layer's (docs/ARCHITECTURE.md, "Sharding at op dispatch").
#pragma once
#include <vector>

#include "layers/layer.h"

namespace keras::layers {

class Merge : public Layer {
 public:
  Merge(const std::string& default_prefix, const std::string& name) : Layer(default_prefix, name) {}
  Tensor operator()(const std::vector<Tensor>& inputs, bool training = false);
  KerasTensor operator()(const std::vector<KerasTensor>& inputs) &;
  KerasTensor operator()(const std::vector<KerasTensor>& inputs) &&;
  using Layer::operator();
  // A merging layer needs a list: one tensor is an error that says so.
  Tensor call(const Tensor& inputs, bool training) override;

 protected:
  // The merge itself, on at least minimum_inputs() tensors.
  virtual Tensor merge(const std::vector<Tensor>& inputs) = 0;
  virtual std::size_t minimum_inputs() const { return 2; }
  virtual std::size_t maximum_inputs() const { return SIZE_MAX; }

 private:
  KerasTensor record(const LayerPtr& owner, const std::vector<KerasTensor>& inputs);
};

// The sum of its inputs: add({x, y}).
class Add : public LayerOf<Add, Merge> {
 public:
  static LayerPtr from_config(LayerConfig& config);
  explicit Add(const std::string& name = "");

 protected:
  Tensor merge(const std::vector<Tensor>& inputs) override;
};

// inputs[0] - inputs[1]; exactly two inputs.
class Subtract : public LayerOf<Subtract, Merge> {
 public:
  static LayerPtr from_config(LayerConfig& config);
  explicit Subtract(const std::string& name = "");

 protected:
  Tensor merge(const std::vector<Tensor>& inputs) override;
  std::size_t maximum_inputs() const override { return 2; }
};

class Multiply : public LayerOf<Multiply, Merge> {
 public:
  static LayerPtr from_config(LayerConfig& config);
  explicit Multiply(const std::string& name = "");

 protected:
  Tensor merge(const std::vector<Tensor>& inputs) override;
};

class Average : public LayerOf<Average, Merge> {
 public:
  static LayerPtr from_config(LayerConfig& config);
  explicit Average(const std::string& name = "");

 protected:
  Tensor merge(const std::vector<Tensor>& inputs) override;
};

class Maximum : public LayerOf<Maximum, Merge> {
 public:
  static LayerPtr from_config(LayerConfig& config);
  explicit Maximum(const std::string& name = "");

 protected:
  Tensor merge(const std::vector<Tensor>& inputs) override;
};

class Minimum : public LayerOf<Minimum, Merge> {
 public:
  static LayerPtr from_config(LayerConfig& config);
  explicit Minimum(const std::string& name = "");

 protected:
  Tensor merge(const std::vector<Tensor>& inputs) override;
};

// Joins its inputs along `axis` (default the last); every other dimension must agree.
class Concatenate : public LayerOf<Concatenate, Merge> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  explicit Concatenate(std::int64_t axis = -1, const std::string& name = "");

 protected:
  Tensor merge(const std::vector<Tensor>& inputs) override;
  std::size_t minimum_inputs() const override { return 1; }

 private:
  std::int64_t axis_;
};

// keras.layers.Dot: the dot product of two batches of tensors along axes[0] of the first and
// axes[1] of the second (Keras' batch_dot: the batch dimension is kept, the other dimensions of
// the first then of the second follow; a result of rank 1 becomes (batch, 1)). With normalize,
// each input is L2-normalised along its axis first (cosine proximity).
class Dot : public LayerOf<Dot, Merge> {
 public:
  explicit Dot(std::int64_t axes, bool normalize = false, const std::string& name = "");
  Dot(std::int64_t first_axis, std::int64_t second_axis, bool normalize = false, const std::string& name = "");

 protected:
  Tensor merge(const std::vector<Tensor>& inputs) override;
  std::size_t maximum_inputs() const override { return 2; }

 private:
  std::int64_t first_axis_, second_axis_;
  bool normalize_;
};

}  // namespace keras::layers
