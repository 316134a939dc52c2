// Losses with Keras' names and reductions: each returns the mean over the batch of the
// per-sample loss, as a scalar tensor that can be differentiated.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "engine/tensor.h"

namespace keras::losses {

class Loss {
 public:
  virtual ~Loss() = default;
  virtual Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const = 0;
  virtual std::string name() const = 0;
  // True when labels are class indices (sparse), which decides what "accuracy" means.
  virtual bool sparse_labels() const { return false; }
  // True when labels are 0/1 per element (binary cross-entropy): "accuracy" is binary then.
  virtual bool binary_labels() const { return false; }
};
using LossPtr = std::shared_ptr<const Loss>;

// Labels: int32/int64 class indices of shape (batch,) or (batch, 1); predictions (batch, classes).
class SparseCategoricalCrossentropy : public Loss {
 public:
  explicit SparseCategoricalCrossentropy(bool from_logits = false) : from_logits_(from_logits) {}
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "sparse_categorical_crossentropy"; }
  bool sparse_labels() const override { return true; }
  bool from_logits() const { return from_logits_; }

 private:
  bool from_logits_;
};

// Labels: one-hot (or soft) float targets of the predictions' shape. label_smoothing moves
// them toward uniform: y * (1 - s) + s / classes.
class CategoricalCrossentropy : public Loss {
 public:
  explicit CategoricalCrossentropy(bool from_logits = false, double label_smoothing = 0.0);
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "categorical_crossentropy"; }

 private:
  bool from_logits_;
  double label_smoothing_;
};

// Targets in [0, 1] of the predictions' shape; predictions are probabilities (clipped to
// [1e-7, 1 - 1e-7]) or, with from_logits, logits (computed stably). label_smoothing moves the
// targets toward 0.5: y * (1 - s) + s / 2. The mean over the last axis, then over the batch.
class BinaryCrossentropy : public Loss {
 public:
  explicit BinaryCrossentropy(bool from_logits = false, double label_smoothing = 0.0);
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "binary_crossentropy"; }
  bool binary_labels() const override { return true; }

 private:
  bool from_logits_;
  double label_smoothing_;
};

class MeanAbsoluteError : public Loss {
 public:
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "mean_absolute_error"; }
};

// 0.5 * e^2 where |e| <= delta, delta * |e| - 0.5 * delta^2 beyond (e = y_pred - y_true).
class Huber : public Loss {
 public:
  explicit Huber(double delta = 1.0);
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "huber_loss"; }

 private:
  double delta_;
};

// sum(y_true * log(y_true / y_pred)) over the last axis, both clipped to [1e-7, 1].
class KLDivergence : public Loss {
 public:
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "kl_divergence"; }
};

// -sum(l2_normalize(y_true) * l2_normalize(y_pred)) along `axis`: -1 for parallel vectors.
class CosineSimilarity : public Loss {
 public:
  explicit CosineSimilarity(std::int64_t axis = -1) : axis_(axis) {}
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "cosine_similarity"; }

 private:
  std::int64_t axis_;
};

class MeanSquaredError : public Loss {
 public:
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "mean_squared_error"; }
};

// By Keras name: sparse_categorical_crossentropy, categorical_crossentropy,
// binary_crossentropy, mean_squared_error (mse), mean_absolute_error (mae), huber,
// kl_divergence (kld), cosine_similarity. Cross-entropies by name take probabilities
// (from_logits=false), as in Keras. Throws ValueError for any other name.
LossPtr get(const std::string& name);

}  // namespace keras::losses
