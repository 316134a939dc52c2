// Losses with Keras' names and reductions: each returns the mean over the batch of the
// per-sample loss, as a scalar tensor that can be differentiated.
#pragma once
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

// Labels: one-hot (or soft) float targets of the predictions' shape.
class CategoricalCrossentropy : public Loss {
 public:
  explicit CategoricalCrossentropy(bool from_logits = false) : from_logits_(from_logits) {}
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "categorical_crossentropy"; }

 private:
  bool from_logits_;
};

class MeanSquaredError : public Loss {
 public:
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const override;
  std::string name() const override { return "mean_squared_error"; }
};

// By Keras name: sparse_categorical_crossentropy, categorical_crossentropy,
// mean_squared_error (or mse). Cross-entropies by name take probabilities (from_logits=false),
// as in Keras. Throws ValueError for any other name.
LossPtr get(const std::string& name);

}  // namespace keras::losses
