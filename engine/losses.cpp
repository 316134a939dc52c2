// Loss formulas. Probabilities (from_logits=false) are clipped to [1e-7, 1-1e-7] before the
// log, as Keras does, so a confident wrong prediction gives a large finite loss, not inf.
#include "engine/losses.h"

#include "engine/errors.h"
#include "engine/ops.h"

namespace keras::losses {
namespace {

constexpr double kEpsilon = 1e-7;

Tensor log_probabilities(const Tensor& y_pred, bool from_logits) {
  if (from_logits) return ops::log_softmax(y_pred, -1);
  // Keras renormalises the probabilities over the last axis, then clips.
  Tensor normalised = y_pred / ops::sum(y_pred, {-1}, /*keepdims=*/true);
  Tensor clipped = ops::minimum(ops::maximum(normalised, ops::scalar_like(y_pred, kEpsilon)),
                                ops::scalar_like(y_pred, 1.0 - kEpsilon));
  return ops::log(clipped);
}

void check_predictions(const Tensor& y_pred, const char* loss) {
  if (!y_pred.defined()) throw ValueError(str(loss, ": y_pred is undefined"));
  if (!is_floating(y_pred.dtype())) {
    throw DTypeError(str(loss, ": predictions must be float32 or float64, got ",
                         dtype_name(y_pred.dtype())));
  }
}

}  // namespace

Tensor SparseCategoricalCrossentropy::operator()(const Tensor& y_true,
                                                 const Tensor& y_pred) const {
  const char* loss = "sparse_categorical_crossentropy";
  check_predictions(y_pred, loss);
  if (!y_true.defined()) throw ValueError(str(loss, ": y_true is undefined"));
  if (y_true.dtype() != int32 && y_true.dtype() != int64) {
    throw DTypeError(str(loss, ": labels must be integer class indices (int32 or int64), got ",
                         dtype_name(y_true.dtype()),
                         "; for one-hot float labels use categorical_crossentropy"));
  }
  if (y_pred.rank() < 1) throw ShapeError(str(loss, ": predictions must have a class axis"));
  Tensor labels = y_true;
  if (labels.rank() == y_pred.rank() && labels.shape().back() == 1) {
    labels = ops::squeeze(labels, -1);
  }
  Shape expected(y_pred.shape().begin(), y_pred.shape().end() - 1);
  if (labels.shape() != expected) {
    throw ShapeError(str(loss, ": labels of shape ", shape_to_string(y_true.shape()),
                         " do not fit predictions of shape ", shape_to_string(y_pred.shape()),
                         "; expected labels of shape ", shape_to_string(expected)));
  }
  std::int64_t classes = y_pred.shape().back();
  ops::check_indices(labels, 0, classes,
                     str(loss, ": label {} is out of range for ", classes,
                         " classes; expected labels in [0, ", classes, ")"));
  Tensor picked = ops::one_hot(labels, classes, y_pred.dtype()) *
                  log_probabilities(y_pred, from_logits_);
  return -ops::mean(ops::sum(picked, {-1}));
}

Tensor CategoricalCrossentropy::operator()(const Tensor& y_true, const Tensor& y_pred) const {
  const char* loss = "categorical_crossentropy";
  check_predictions(y_pred, loss);
  if (!y_true.defined()) throw ValueError(str(loss, ": y_true is undefined"));
  if (!is_floating(y_true.dtype())) {
    throw DTypeError(str(loss, ": labels must be one-hot floats, got ",
                         dtype_name(y_true.dtype()),
                         "; for integer class indices use sparse_categorical_crossentropy"));
  }
  if (y_true.shape() != y_pred.shape()) {
    throw ShapeError(str(loss, ": labels of shape ", shape_to_string(y_true.shape()),
                         " and predictions of shape ", shape_to_string(y_pred.shape()),
                         " must have the same shape"));
  }
  Tensor labels = ops::cast(y_true, y_pred.dtype());
  return -ops::mean(ops::sum(labels * log_probabilities(y_pred, from_logits_), {-1}));
}

Tensor MeanSquaredError::operator()(const Tensor& y_true, const Tensor& y_pred) const {
  const char* loss = "mean_squared_error";
  check_predictions(y_pred, loss);
  if (!y_true.defined()) throw ValueError(str(loss, ": y_true is undefined"));
  Tensor targets = ops::cast(y_true, y_pred.dtype());
  if (targets.shape() != y_pred.shape()) {
    throw ShapeError(str(loss, ": labels of shape ", shape_to_string(y_true.shape()),
                         " and predictions of shape ", shape_to_string(y_pred.shape()),
                         " must have the same shape"));
  }
  return ops::mean(ops::square(y_pred - targets));
}

LossPtr get(const std::string& name) {
  if (name == "sparse_categorical_crossentropy") {
    return std::make_shared<SparseCategoricalCrossentropy>();
  }
  if (name == "categorical_crossentropy") return std::make_shared<CategoricalCrossentropy>();
  if (name == "mean_squared_error" || name == "mse") return std::make_shared<MeanSquaredError>();
  throw ValueError(str("unknown loss '", name,
                       "'; expected one of sparse_categorical_crossentropy, "
                       "categorical_crossentropy, mean_squared_error (mse)"));
}

}  // namespace keras::losses
