// Losses with Keras' names, formulas and reduction: call() gives the per-sample losses (Keras'
// Loss.call) and calling the loss reduces them as Keras' default "sum_over_batch_size" does,
// with optional sample weights: mean(losses * sample_weight), a scalar tensor that can be
// differentiated. A loss of the user's own subclasses Loss (call and name) or is a function
// (FunctionLoss), as in Keras.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/tensor.h"

namespace keras::losses {

class Loss {
 public:
  virtual ~Loss() = default;
  // The per-sample losses: one value per sample (per timestep too, for sequence targets).
  virtual Tensor call(const Tensor& y_true, const Tensor& y_pred) const = 0;
  // Keras' Loss.__call__: call(), weighted by `sample_weight` when it is given (one weight per
  // sample, shape (batch,) or (batch, 1); per timestep, the losses' shape), then the mean over
  // every value: sum(losses * weights) / count, the weights not renormalised.
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight = Tensor()) const;
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
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
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
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
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
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "binary_crossentropy"; }
  bool binary_labels() const override { return true; }

 private:
  bool from_logits_;
  double label_smoothing_;
};

class MeanAbsoluteError : public Loss {
 public:
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "mean_absolute_error"; }
};

// 0.5 * e^2 where |e| <= delta, delta * |e| - 0.5 * delta^2 beyond (e = y_pred - y_true).
class Huber : public Loss {
 public:
  explicit Huber(double delta = 1.0);
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "huber_loss"; }

 private:
  double delta_;
};

// sum(y_true * log(y_true / y_pred)) over the last axis, both clipped to [1e-7, 1].
class KLDivergence : public Loss {
 public:
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "kl_divergence"; }
};

// -sum(l2_normalize(y_true) * l2_normalize(y_pred)) along `axis`: -1 for parallel vectors.
class CosineSimilarity : public Loss {
 public:
  explicit CosineSimilarity(std::int64_t axis = -1) : axis_(axis) {}
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "cosine_similarity"; }

 private:
  std::int64_t axis_;
};

class MeanSquaredError : public Loss {
 public:
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "mean_squared_error"; }
};

// A loss from a function of (y_true, y_pred) giving per-sample losses (Keras' loss=my_function):
// reduced and weighted as every loss is.
class FunctionLoss : public Loss {
 public:
  using Function = std::function<Tensor(const Tensor& y_true, const Tensor& y_pred)>;
  FunctionLoss(Function function, std::string name);
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override { return function_(y_true, y_pred); }
  std::string name() const override { return name_; }

 private:
  Function function_;
  std::string name_;
};

// By Keras name: sparse_categorical_crossentropy, categorical_crossentropy,
// binary_crossentropy, mean_squared_error (mse), mean_absolute_error (mae), huber,
// kl_divergence (kld), cosine_similarity. Cross-entropies by name take probabilities
// (from_logits=false), as in Keras. Throws ValueError for any other name.
LossPtr get(const std::string& name);

}  // namespace keras::losses
