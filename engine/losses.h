// Losses with Keras' names, formulas and reductions: call() gives the per-sample losses (Keras'
// Loss.call) and calling the loss reduces them as the loss's Reduction says (Keras' default
// "sum_over_batch_size": mean(losses * sample_weight)), a tensor that can be differentiated.
// A loss of the user's own subclasses Loss (call and name) or is a function (FunctionLoss), as
// in Keras. Under a distribution a reduction is over the global batch (engine/global_batch.h).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/tensor.h"

namespace keras::losses {

// Keras' loss reductions, given the weighted losses w*l (w: sample weight times mask):
//   sum_over_batch_size, mean: sum(w*l) / count (count: the number of loss values; with a mask
//     (ignore_class), the number the mask keeps);
//   sum: sum(w*l);  mean_with_sample_weight: sum(w*l) / sum(w);
//   none: the weighted per-sample losses themselves (not a scalar: fit refuses it).
enum class Reduction { sum_over_batch_size, mean, sum, mean_with_sample_weight, none };
// Keras' names ("none" for None); a ValueError naming the choices for any other.
Reduction reduction_from_name(const std::string& name);
std::string reduction_name(Reduction reduction);

class Loss {
 public:
  explicit Loss(Reduction reduction = Reduction::sum_over_batch_size) : reduction_(reduction) {}
  virtual ~Loss() = default;
  // The per-sample losses: one value per sample (per timestep too, for sequence targets).
  virtual Tensor call(const Tensor& y_true, const Tensor& y_pred) const = 0;
  // The loss values that count, as 1 and 0 of the losses' shape (Keras' mask on the losses),
  // or undefined when all count (every loss but one with an ignore_class).
  virtual Tensor mask(const Tensor& y_true, const Tensor& y_pred) const;
  // Keras' Loss.__call__: call(), weighted by `sample_weight` when it is given (one weight per
  // sample, shape (batch,) or (batch, 1); per timestep, the losses' shape) and by mask(), then
  // reduced (see Reduction). Within a distributed step the sums and counts are the global
  // batch's, so that the trainer's scaled sum of every process's loss is the global loss.
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight = Tensor()) const;
  virtual std::string name() const = 0;
  Reduction reduction() const { return reduction_; }
  // True when labels are class indices (sparse), which decides what "accuracy" means.
  virtual bool sparse_labels() const { return false; }
  // True when labels are 0/1 per element (binary cross-entropy): "accuracy" is binary then.
  virtual bool binary_labels() const { return false; }

 private:
  Reduction reduction_;
};
using LossPtr = std::shared_ptr<const Loss>;

// Labels: int32/int64 class indices of shape (batch,) or (batch, 1); predictions (batch, classes).
// With ignore_class, labels equal to it (any value, e.g. -1 or 255 for padding) give a loss of 0
// and are left out of the mean: the count is of the labels kept, over the global batch.
class SparseCategoricalCrossentropy : public Loss {
 public:
  explicit SparseCategoricalCrossentropy(bool from_logits = false, std::optional<std::int64_t> ignore_class = {},
                                         Reduction reduction = Reduction::sum_over_batch_size)
      : Loss(reduction), from_logits_(from_logits), ignore_class_(ignore_class) {}
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
  Tensor mask(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "sparse_categorical_crossentropy"; }
  bool sparse_labels() const override { return true; }
  bool from_logits() const { return from_logits_; }

 private:
  Tensor labels_of(const Tensor& y_true, const Tensor& y_pred) const;
  bool from_logits_;
  std::optional<std::int64_t> ignore_class_;
};

// Labels: one-hot (or soft) float targets of the predictions' shape. label_smoothing moves
// them toward uniform: y * (1 - s) + s / classes.
class CategoricalCrossentropy : public Loss {
 public:
  explicit CategoricalCrossentropy(bool from_logits = false, double label_smoothing = 0.0,
                                   Reduction reduction = Reduction::sum_over_batch_size);
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
  explicit BinaryCrossentropy(bool from_logits = false, double label_smoothing = 0.0,
                              Reduction reduction = Reduction::sum_over_batch_size);
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "binary_crossentropy"; }
  bool binary_labels() const override { return true; }

 private:
  bool from_logits_;
  double label_smoothing_;
};

class MeanAbsoluteError : public Loss {
 public:
  explicit MeanAbsoluteError(Reduction reduction = Reduction::sum_over_batch_size) : Loss(reduction) {}
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "mean_absolute_error"; }
};

// 0.5 * e^2 where |e| <= delta, delta * |e| - 0.5 * delta^2 beyond (e = y_pred - y_true).
class Huber : public Loss {
 public:
  explicit Huber(double delta = 1.0, Reduction reduction = Reduction::sum_over_batch_size);
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "huber_loss"; }

 private:
  double delta_;
};

// sum(y_true * log(y_true / y_pred)) over the last axis, both clipped to [1e-7, 1].
class KLDivergence : public Loss {
 public:
  explicit KLDivergence(Reduction reduction = Reduction::sum_over_batch_size) : Loss(reduction) {}
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "kl_divergence"; }
};

// -sum(l2_normalize(y_true) * l2_normalize(y_pred)) along `axis`: -1 for parallel vectors.
class CosineSimilarity : public Loss {
 public:
  explicit CosineSimilarity(std::int64_t axis = -1, Reduction reduction = Reduction::sum_over_batch_size)
      : Loss(reduction), axis_(axis) {}
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "cosine_similarity"; }

 private:
  std::int64_t axis_;
};

class MeanSquaredError : public Loss {
 public:
  explicit MeanSquaredError(Reduction reduction = Reduction::sum_over_batch_size) : Loss(reduction) {}
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "mean_squared_error"; }
};

// A loss from a function of (y_true, y_pred) giving per-sample losses (Keras' loss=my_function):
// reduced and weighted as every loss is.
class FunctionLoss : public Loss {
 public:
  using Function = std::function<Tensor(const Tensor& y_true, const Tensor& y_pred)>;
  FunctionLoss(Function function, std::string name, Reduction reduction = Reduction::sum_over_batch_size);
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override { return function_(y_true, y_pred); }
  std::string name() const override { return name_; }

 private:
  Function function_;
  std::string name_;
};

// Keras' squeeze_or_expand_to_same_rank for sample weights, in `values`' dtype: weights of shape
// (batch,) against values (batch, steps) get a trailing axis; (batch, 1) against (batch,) lose
// theirs; then they must broadcast to the values. A ShapeError naming `what` otherwise.
Tensor sample_weights_like(const Tensor& sample_weight, const Tensor& values, const std::string& what);

// By Keras name: sparse_categorical_crossentropy, categorical_crossentropy,
// binary_crossentropy, mean_squared_error (mse), mean_absolute_error (mae), huber,
// kl_divergence (kld), cosine_similarity. Cross-entropies by name take probabilities
// (from_logits=false), as in Keras. Throws ValueError for any other name.
LossPtr get(const std::string& name);

}  // namespace keras::losses
