// Small layers without (or with simple) weights: Activation, ReLU, Rescaling, Softmax,
// Dropout, Flatten, Reshape, Embedding, LayerNormalization, RMSNormalization — Keras' semantics
// and defaults.
#pragma once
#include <optional>

#include "distribution/sharding/sharded_tensor.h"
#include "layers/activations.h"
#include "layers/layer.h"
#include "layers/merging.h"  // Add lived here

namespace keras::layers {

class Activation : public LayerOf<Activation> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  explicit Activation(const std::string& activation, const std::string& name = "");
  Tensor call(const Tensor& inputs, bool training) override;
  // Element-wise activations keep a sharded input as it is; softmax gets the data layout.

 private:
  activations::ActivationFn activation_;
  std::string activation_name_;
  bool elementwise_;
};

// keras.layers.ReLU: max_value where x >= max_value, x where threshold <= x < max_value,
// negative_slope * (x - threshold) below the threshold; the defaults are plain relu.
struct ReLUOptions {
  std::optional<double> max_value{};
  double negative_slope = 0.0;
  double threshold = 0.0;
  std::string name{};
};

class ReLU : public LayerOf<ReLU> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  explicit ReLU(ReLUOptions options = {});
  Tensor call(const Tensor& inputs, bool training) override;
  std::string class_name() const override { return "ReLU"; }

 private:
  ReLUOptions options_;
};

// keras.layers.Rescaling: x * scale + offset (images' 0..255 to 0..1 with scale 1 / 255).
class Rescaling : public LayerOf<Rescaling> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  explicit Rescaling(double scale, double offset = 0.0, const std::string& name = "");
  Tensor call(const Tensor& inputs, bool training) override;

 private:
  double scale_, offset_;
};

// Softmax along `axis`; with a mask (bool, or numbers kept where > 0.5, broadcastable to the
// input and of no greater rank) as Keras 3: masked positions get -1e9 before the softmax and 0
// after it, so that a fully masked line is zeros rather than uniform.
class Softmax : public LayerOf<Softmax> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  explicit Softmax(std::int64_t axis = -1, const std::string& name = "");
  Tensor call(const Tensor& inputs, bool training) override;
  Tensor operator()(const Tensor& inputs, const Tensor& mask);
  using Layer::operator();
  static Tensor masked_softmax(const Tensor& inputs, const Tensor& mask, std::int64_t axis);

 private:
  std::int64_t axis_;
};

// In training, zeroes each element with probability `rate` and scales the rest by
// 1 / (1 - rate); the identity in inference.
class Dropout : public LayerOf<Dropout> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  explicit Dropout(double rate, std::optional<std::uint64_t> seed = std::nullopt,
                   const std::string& name = "");
  Tensor call(const Tensor& inputs, bool training) override;
  std::vector<std::uint64_t> random_counters() const override { return {calls_}; }
  void set_random_counters(const std::vector<std::uint64_t>& counters) override;

 private:
  double rate_;
  std::uint64_t seed_;
  std::uint64_t calls_ = 0;
};

// (batch, d1, d2, …) -> (batch, d1*d2*…).
class Flatten : public LayerOf<Flatten> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  explicit Flatten(const std::string& name = "");
  Tensor call(const Tensor& inputs, bool training) override;
};

// (batch, …) -> (batch, *target_shape); one target dimension may be -1.
class Reshape : public LayerOf<Reshape> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  explicit Reshape(Shape target_shape, const std::string& name = "");
  Tensor call(const Tensor& inputs, bool training) override;

 private:
  Shape target_shape_;
};

// Integer indices -> rows of an (input_dim, output_dim) table. Under ModelParallel the table
// may be split by vocabulary ("model", None): each process looks up the rows it holds, zeroes
// the others, and one all-reduce sums the partial lookups; or by feature (None, "model"): each
// process returns its columns of every row, and the output stays sharded on its last axis.
class Embedding : public LayerOf<Embedding> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  Embedding(std::int64_t input_dim, std::int64_t output_dim,
            initializers::InitializerPtr embeddings_initializer = nullptr,
            const std::string& name = "");
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& inputs, bool training) override;
  const Tensor& embeddings() const { return embeddings_; }
  std::int64_t input_dim() const { return input_dim_; }

 private:
  std::int64_t input_dim_, output_dim_;
  initializers::InitializerPtr initializer_;
  Tensor embeddings_;
};

// Normalises over the last axis: (x - mean) / sqrt(var + epsilon) * gamma + beta. Under
// ModelParallel the last axis may be sharded: the row sums are then all-reduced over the axis
// that splits it (two small all-reduces per call), and gamma and beta are used in the same
// blocks.
class LayerNormalization : public LayerOf<LayerNormalization> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  explicit LayerNormalization(double epsilon = 1e-3, bool center = true, bool scale = true,
                              const std::string& name = "");
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& inputs, bool training) override;

 private:
  double epsilon_;
  bool center_, scale_;
  std::int64_t width_ = 0;  // the last dimension it was built for
  Tensor gamma_, beta_;
};

// keras_hub.layers.PositionEmbedding: a learned (sequence_length, features) table whose first T
// rows, broadcast to the input's shape (batch, T, features), are the positions' embeddings; add
// them to the token embeddings. Its input is only read for its shape.
class PositionEmbedding : public LayerOf<PositionEmbedding> {
 public:
  explicit PositionEmbedding(std::int64_t sequence_length, initializers::InitializerPtr initializer = nullptr,
                             const std::string& name = "");
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& inputs, bool training) override;
  const Tensor& embeddings() const { return embeddings_; }

 private:
  std::int64_t sequence_length_;
  initializers::InitializerPtr initializer_;
  Tensor embeddings_;
};

// keras.layers.RMSNormalization (Keras 3.9): x * rsqrt(mean(x^2 over the last axis) + epsilon)
// * scale, with `scale` (last dimension,) initialised to ones. Under ModelParallel its input is
// gathered to the data layout (no sharding rule of its own yet).
class RMSNormalization : public LayerOf<RMSNormalization> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  explicit RMSNormalization(double epsilon = 1e-6, const std::string& name = "");
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& inputs, bool training) override;
  std::string class_name() const override { return "RMSNormalization"; }

 private:
  double epsilon_;
  std::int64_t width_ = 0;  // the last dimension it was built for
  Tensor scale_;
};

}  // namespace keras::layers
