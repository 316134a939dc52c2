// Loss formulas. Probabilities (from_logits=false) are clipped to [1e-7, 1-1e-7] before the
// log, as Keras does, so a confident wrong prediction gives a large finite loss, not inf.
#include "engine/losses.h"

#include <cmath>

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

Tensor Loss::operator()(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) const {
  Tensor losses = call(y_true, y_pred);
  if (!losses.defined()) throw ValueError(str(name(), ": call() gave an undefined tensor"));
  if (!sample_weight.defined()) return ops::mean(losses);
  // Keras' squeeze_or_expand_to_same_rank: weights (batch,) against losses (batch, steps) get a
  // trailing axis; weights (batch, 1) against losses (batch,) lose theirs.
  Tensor weights = ops::cast(sample_weight, losses.dtype());
  if (weights.rank() == losses.rank() + 1 && weights.shape().back() == 1) weights = ops::squeeze(weights, -1);
  if (weights.rank() < losses.rank()) {
    Shape expanded = weights.shape();
    expanded.resize(static_cast<std::size_t>(losses.rank()), 1);
    weights = ops::reshape(weights, expanded);
  }
  bool fits = weights.rank() == losses.rank();
  for (int axis = 0; fits && axis < static_cast<int>(weights.rank()); ++axis) {
    fits = weights.dim(axis) == losses.dim(axis) || weights.dim(axis) == 1;
  }
  if (!fits || (losses.rank() > 0 && weights.dim(0) != losses.dim(0))) {
    throw ShapeError(str(name(), ": sample_weight of shape ", shape_to_string(sample_weight.shape()),
                         " does not fit the per-sample losses of shape ", shape_to_string(losses.shape()),
                         "; expected one weight per sample, shape (", losses.rank() > 0 ? losses.dim(0) : 1, ",)"));
  }
  return ops::mean(losses * weights);
}

FunctionLoss::FunctionLoss(Function function, std::string name) : function_(std::move(function)), name_(std::move(name)) {
  if (!function_) throw ValueError(str("FunctionLoss '", name_, "': the function is empty"));
}

Tensor SparseCategoricalCrossentropy::call(const Tensor& y_true, const Tensor& y_pred) const {
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
  return -ops::sum(picked, {-1});
}

namespace {
void check_smoothing(double label_smoothing, const char* loss) {
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0)) {
    throw ValueError(str(loss, ": label_smoothing must be in [0, 1], got ", label_smoothing));
  }
}

// Float targets of the predictions' shape, in the predictions' dtype.
Tensor targets_like(const Tensor& y_true, const Tensor& y_pred, const char* loss) {
  check_predictions(y_pred, loss);
  if (!y_true.defined()) throw ValueError(str(loss, ": y_true is undefined"));
  if (y_true.shape() != y_pred.shape()) {
    throw ShapeError(str(loss, ": labels of shape ", shape_to_string(y_true.shape()),
                         " and predictions of shape ", shape_to_string(y_pred.shape()),
                         " must have the same shape"));
  }
  return ops::cast(y_true, y_pred.dtype());
}

Tensor clipped(const Tensor& x, double low, double high) {
  return ops::minimum(ops::maximum(x, ops::scalar_like(x, low)), ops::scalar_like(x, high));
}

// keras.losses' l2_normalize: x / sqrt(max(sum(x^2), 1e-12)) along `axis`.
Tensor l2_normalized(const Tensor& x, std::int64_t axis) {
  Tensor squares = ops::sum(ops::square(x), {axis}, /*keepdims=*/true);
  return x * ops::rsqrt(ops::maximum(squares, ops::scalar_like(squares, 1e-12)));
}
}  // namespace

CategoricalCrossentropy::CategoricalCrossentropy(bool from_logits, double label_smoothing)
    : from_logits_(from_logits), label_smoothing_(label_smoothing) {
  check_smoothing(label_smoothing, "categorical_crossentropy");
}

BinaryCrossentropy::BinaryCrossentropy(bool from_logits, double label_smoothing)
    : from_logits_(from_logits), label_smoothing_(label_smoothing) {
  check_smoothing(label_smoothing, "binary_crossentropy");
}

Tensor BinaryCrossentropy::call(const Tensor& y_true, const Tensor& y_pred) const {
  Tensor targets = targets_like(y_true, y_pred, "binary_crossentropy");
  if (y_pred.rank() < 1) throw ShapeError("binary_crossentropy: predictions need at least one axis");
  if (label_smoothing_ > 0) targets = targets * (1.0 - label_smoothing_) + 0.5 * label_smoothing_;
  Tensor per_element;
  if (from_logits_) {
    // max(x, 0) - x * y + log(1 + exp(-|x|)): no overflow for large |x|.
    per_element = ops::relu(y_pred) - y_pred * targets + ops::log(1.0 + ops::exp(-ops::abs(y_pred)));
  } else {
    Tensor p = clipped(y_pred, kEpsilon, 1.0 - kEpsilon);
    per_element = -(targets * ops::log(p) + (1.0 - targets) * ops::log(1.0 - p));
  }
  return ops::mean(per_element, {-1});
}

Tensor MeanAbsoluteError::call(const Tensor& y_true, const Tensor& y_pred) const {
  Tensor targets = targets_like(y_true, y_pred, "mean_absolute_error");
  if (y_pred.rank() < 1) throw ShapeError("mean_absolute_error: predictions need at least one axis");
  return ops::mean(ops::abs(y_pred - targets), {-1});
}

Huber::Huber(double delta) : delta_(delta) {
  if (!(delta > 0) || !std::isfinite(delta)) throw ValueError(str("huber_loss: delta must be > 0, got ", delta));
}

Tensor Huber::call(const Tensor& y_true, const Tensor& y_pred) const {
  Tensor error = y_pred - targets_like(y_true, y_pred, "huber_loss");
  Tensor magnitude = ops::abs(error);
  Tensor quadratic = 0.5 * ops::square(error);
  Tensor linear = delta_ * magnitude - 0.5 * delta_ * delta_;
  if (y_pred.rank() < 1) throw ShapeError("huber_loss: predictions need at least one axis");
  return ops::mean(ops::where(ops::less_equal(magnitude, ops::scalar_like(magnitude, delta_)), quadratic, linear), {-1});
}

Tensor KLDivergence::call(const Tensor& y_true, const Tensor& y_pred) const {
  Tensor targets = clipped(targets_like(y_true, y_pred, "kl_divergence"), kEpsilon, 1.0);
  if (y_pred.rank() < 1) throw ShapeError("kl_divergence: predictions need at least one axis");
  Tensor predictions = clipped(y_pred, kEpsilon, 1.0);
  return ops::sum(targets * ops::log(targets / predictions), {-1});
}

Tensor CosineSimilarity::call(const Tensor& y_true, const Tensor& y_pred) const {
  Tensor targets = targets_like(y_true, y_pred, "cosine_similarity");
  std::int64_t rank = y_pred.rank();
  if (axis_ < -rank || axis_ >= rank) {
    throw ValueError(str("cosine_similarity: axis ", axis_, " is out of range for predictions of rank ", rank));
  }
  return -ops::sum(l2_normalized(targets, axis_) * l2_normalized(y_pred, axis_), {axis_});
}

Tensor CategoricalCrossentropy::call(const Tensor& y_true, const Tensor& y_pred) const {
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
  if (label_smoothing_ > 0) {
    labels = labels * (1.0 - label_smoothing_) + label_smoothing_ / double(y_pred.shape().back());
  }
  return -ops::sum(labels * log_probabilities(y_pred, from_logits_), {-1});
}

Tensor MeanSquaredError::call(const Tensor& y_true, const Tensor& y_pred) const {
  const char* loss = "mean_squared_error";
  check_predictions(y_pred, loss);
  if (!y_true.defined()) throw ValueError(str(loss, ": y_true is undefined"));
  Tensor targets = ops::cast(y_true, y_pred.dtype());
  if (targets.shape() != y_pred.shape()) {
    throw ShapeError(str(loss, ": labels of shape ", shape_to_string(y_true.shape()),
                         " and predictions of shape ", shape_to_string(y_pred.shape()),
                         " must have the same shape"));
  }
  if (y_pred.rank() < 1) throw ShapeError("mean_squared_error: predictions need at least one axis");
  return ops::mean(ops::square(y_pred - targets), {-1});
}

LossPtr get(const std::string& name) {
  if (name == "sparse_categorical_crossentropy") {
    return std::make_shared<SparseCategoricalCrossentropy>();
  }
  if (name == "categorical_crossentropy") return std::make_shared<CategoricalCrossentropy>();
  if (name == "mean_squared_error" || name == "mse") return std::make_shared<MeanSquaredError>();
  if (name == "binary_crossentropy") return std::make_shared<BinaryCrossentropy>();
  if (name == "mean_absolute_error" || name == "mae") return std::make_shared<MeanAbsoluteError>();
  if (name == "huber" || name == "huber_loss") return std::make_shared<Huber>();
  if (name == "kl_divergence" || name == "kld") return std::make_shared<KLDivergence>();
  if (name == "cosine_similarity") return std::make_shared<CosineSimilarity>();
  throw ValueError(str("unknown loss '", name,
                       "'; expected one of sparse_categorical_crossentropy, categorical_crossentropy, ",
                       "binary_crossentropy, mean_squared_error (mse), mean_absolute_error (mae), huber, ",
                       "kl_divergence (kld), cosine_similarity"));
}

}  // namespace keras::losses
