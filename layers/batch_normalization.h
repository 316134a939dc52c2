// BatchNormalization with Keras' arguments, defaults and weight paths (gamma, beta,
// moving_mean, moving_variance; the moving statistics non-trainable). Training normalises with
// the batch's mean and (biased) variance and moves the moving statistics by `momentum`;
// inference uses the moving statistics. Keras' formula, in its order of operations:
// inv = rsqrt(var + epsilon) * gamma, out = x * inv + (beta - mean * inv).
//
// Under a distribution that splits the batch over processes:
// - synchronized=false (Keras' default): each process normalises with its own rows'
//   statistics, as each replica does under TensorFlow's MirroredStrategy. The moving
//   statistics move by the row-weighted mean of the processes' batch statistics (one small
//   all-reduce per call), which is what TF-Keras reads back from its per-replica copies
//   (ON_READ variables with MEAN aggregation); so every process holds the same moving
//   statistics, and saving them needs no choice of process.
// - synchronized=true: the statistics are those of the global batch (the sums all-reduced over
//   the batch axis, two all-reduces forward and two backward), so training equals one process
//   on the whole batch. Keras 3 offers this on TensorFlow only; here it runs on every backend.
#pragma once
#include <string>

#include "layers/layer.h"

namespace keras::layers {

struct BatchNormalizationOptions {
  std::int64_t axis = -1;  // the features axis (channels_last images: -1)
  double momentum = 0.99;
  double epsilon = 1e-3;
  bool center = true;  // beta
  bool scale = true;   // gamma
  bool synchronized = false;
  initializers::InitializerPtr beta_initializer{};             // default zeros
  initializers::InitializerPtr gamma_initializer{};            // default ones
  initializers::InitializerPtr moving_mean_initializer{};      // default zeros
  initializers::InitializerPtr moving_variance_initializer{};  // default ones
  std::string name{};
};

class BatchNormalization : public LayerOf<BatchNormalization> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  explicit BatchNormalization(BatchNormalizationOptions options = {});
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& inputs, bool training) override;
  std::string class_name() const override { return "BatchNormalization"; }
  bool synchronizes_batch() const override { return options_.synchronized; }
  const Tensor& moving_mean() const { return moving_mean_; }
  const Tensor& moving_variance() const { return moving_variance_; }

 private:
  BatchNormalizationOptions options_;
  int axis_ = -1;  // normalised against the built rank
  Tensor gamma_, beta_, moving_mean_, moving_variance_;
  Tensor normalize(const Tensor& inputs, const Tensor& mean, const Tensor& variance) const;
  // Moves the moving statistics towards this batch's (`rows` rows on this process).
  void update_moving_statistics(std::int64_t rows, const Tensor& mean, const Tensor& variance);
};

}  // namespace keras::layers
