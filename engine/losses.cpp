// Loss formulas. Probabilities (from_logits=false) are clipped to [1e-7, 1-1e-7] before the
// log, as Keras does, so a confident wrong prediction gives a large finite loss, not inf.
#include "engine/losses.h"

#include <algorithm>
#include <cmath>
#include <exception>

#include "engine/errors.h"
#include "engine/global_batch.h"
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
    throw DTypeError(str(loss, ": predictions must be floating (float32, float64, bfloat16 or float16), got ",
                         dtype_name(y_pred.dtype())));
  }
}

}  // namespace

Reduction reduction_from_name(const std::string& name) {
  if (name == "sum_over_batch_size") return Reduction::sum_over_batch_size;
  if (name == "mean") return Reduction::mean;
  if (name == "sum") return Reduction::sum;
  if (name == "mean_with_sample_weight") return Reduction::mean_with_sample_weight;
  if (name == "none") return Reduction::none;
  throw ValueError(str("unknown loss reduction '", name, "'; expected one of sum_over_batch_size, mean, sum, ",
                       "mean_with_sample_weight, none"));
}

std::string reduction_name(Reduction reduction) {
  switch (reduction) {
    case Reduction::sum_over_batch_size: return "sum_over_batch_size";
    case Reduction::mean: return "mean";
    case Reduction::sum: return "sum";
    case Reduction::mean_with_sample_weight: return "mean_with_sample_weight";
    case Reduction::none: return "none";
  }
  return "unknown";
}

Tensor Loss::mask(const Tensor&, const Tensor&) const { return Tensor(); }

Tensor sample_weights_like(const Tensor& sample_weight, const Tensor& losses, const std::string& loss) {
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
    throw ShapeError(str(loss, ": sample_weight of shape ", shape_to_string(sample_weight.shape()),
                         " does not fit the values of shape ", shape_to_string(losses.shape()),
                         "; expected one weight per sample, shape (", losses.rank() > 0 ? losses.dim(0) : 1, ",)"));
  }
  return weights;
}

namespace {

// numerator / denominator, 0 where the denominator is 0 (Keras' divide_no_nan), on the device.
Tensor divide_no_nan(const Tensor& numerator, const Tensor& denominator) {
  Tensor positive = ops::greater(denominator, ops::scalar_like(denominator, 0.0));
  Tensor safe = ops::where(positive, denominator, ops::scalar_like(denominator, 1.0));
  return ops::where(positive, numerator / safe, ops::scalar_like(numerator, 0.0));
}

// The sums of `locals` over the global batch, read on the host for the all-reduce. A read may
// raise a GPU's deferred error (engine/index_check.h: a label out of range) on the process whose
// rows had it; a flag rides the same all-reduce, so every process stops with it rather than
// wait in a sum that process never joins.
// `numbers` (known on the host) are summed with them.
std::vector<double> global_sums(const GlobalBatch& batch, const std::vector<Tensor>& locals,
                                const std::vector<double>& numbers, const std::string& loss) {
  std::vector<double> sums(locals.size(), 0.0);
  sums.insert(sums.end(), numbers.begin(), numbers.end());
  sums.push_back(0.0);  // the failure flag
  std::exception_ptr failure;
  try {
    NoGradGuard no_grad;
    for (std::size_t i = 0; i < locals.size(); ++i) sums[i] = ops::cast(ops::sum(locals[i]), float64).item();
  } catch (...) {
    failure = std::current_exception();
    std::fill(sums.begin(), sums.begin() + static_cast<std::ptrdiff_t>(locals.size()), 0.0);
  }
  sums.back() = failure ? 1.0 : 0.0;
  batch.sum(sums);
  if (sums.back() > 0) {
    if (failure) std::rethrow_exception(failure);
    throw Error(str(loss, ": computing the loss failed on another process (its message says why); this one stops ",
                    "with it"));
  }
  sums.pop_back();
  return sums;
}

}  // namespace

Tensor Loss::operator()(const Tensor& y_true, const Tensor& y_pred_in, const Tensor& sample_weight) const {
  // Losses compute in float32 whatever the model computed in, as Keras' (their dtype is
  // floatx): a bfloat16 log of a probability near 1 would lose most of the gradient.
  Tensor y_pred = y_pred_in.defined() && is_half_precision(y_pred_in.dtype()) ? ops::cast(y_pred_in, float32) : y_pred_in;
  Tensor losses = call(y_true, y_pred);
  if (!losses.defined()) throw ValueError(str(name(), ": call() gave an undefined tensor"));
  Tensor weights = sample_weight.defined() ? sample_weights_like(sample_weight, losses, name()) : Tensor();
  Tensor kept = mask(y_true, y_pred);
  if (kept.defined()) {
    kept = ops::cast(kept, losses.dtype());
    if (kept.shape() != losses.shape()) {
      throw ShapeError(str(name(), ": mask() gave shape ", shape_to_string(kept.shape()), "; expected the losses' shape ",
                           shape_to_string(losses.shape())));
    }
    weights = weights.defined() ? weights * kept : kept;
  }
  Tensor weighted = weights.defined() ? losses * weights : losses;
  // Keras returns a scalar loss (or per-sample losses under "none") as it is.
  if (reduction_ == Reduction::none || losses.rank() == 0) return weighted;
  const bool divides_by_weights = reduction_ == Reduction::mean_with_sample_weight && weights.defined();
  // The plain mean over the batch: within a distributed step the trainer's scaling by this
  // process's share of the rows makes it the global mean already, bit for bit as before.
  if (!divides_by_weights && reduction_ != Reduction::sum && !kept.defined()) return ops::mean(weighted);

  const GlobalBatch* batch = GlobalBatch::current();
  const double fraction = batch != nullptr ? batch->local_fraction() : 1.0;
  if (reduction_ == Reduction::sum) {
    // The trainer multiplies by `fraction`: the global sum is the sum of the local ones.
    return fraction > 0 ? ops::sum(weighted) * (1.0 / fraction) : ops::sum(weighted) * 0.0;
  }
  // The divisor: the weights' sum as Keras sums them (per-sample weights against per-timestep
  // losses count once per sample, not per timestep: Keras 3.15 gives sum(w*l) / sum(w) there),
  // or Keras' count of the values the mask keeps (it weighs each kept value by total / kept and
  // takes the mean over the total: sum(w*l) / kept).
  Tensor divisor = divides_by_weights ? ops::sum(weights) : ops::sum(kept);
  // One process: on the device, with no read that would make the step wait for it.
  if (batch == nullptr) return divide_no_nan(ops::sum(weighted), divisor);
  // Over the global batch: the divisor's sum over the processes (and, for the mask, the count of
  // loss values, whose ratio to the rows is the same on every process: scaled by `fraction`
  // and summed, sum(w*l) * total / (kept * local_count) gives sum(w*l) / kept).
  const auto local_count = static_cast<double>(losses.size());
  std::vector<double> sums = global_sums(*batch, {divisor}, {local_count}, name());
  double factor = 0.0;  // 0 where there is nothing to divide by
  if (divides_by_weights) {
    factor = sums[0] > 0 && fraction > 0 ? 1.0 / (sums[0] * fraction) : 0.0;
  } else {
    factor = sums[0] > 0 && local_count > 0 ? sums[1] / (sums[0] * local_count) : 0.0;
  }
  return ops::sum(weighted) * factor;
}

FunctionLoss::FunctionLoss(Function function, std::string name, Reduction reduction)
    : Loss(reduction), function_(std::move(function)), name_(std::move(name)) {
  if (!function_) throw ValueError(str("FunctionLoss '", name_, "': the function is empty"));
}

Tensor SparseCategoricalCrossentropy::labels_of(const Tensor& y_true, const Tensor& y_pred) const {
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
  return labels;
}

Tensor SparseCategoricalCrossentropy::mask(const Tensor& y_true, const Tensor& y_pred) const {
  if (!ignore_class_) return Tensor();
  Tensor labels = labels_of(y_true, y_pred);
  return ops::not_equal(labels, ops::scalar_like(labels, static_cast<double>(*ignore_class_)));
}

Tensor SparseCategoricalCrossentropy::call(const Tensor& y_true, const Tensor& y_pred) const {
  const char* loss = "sparse_categorical_crossentropy";
  Tensor labels = labels_of(y_true, y_pred);
  Tensor kept;
  if (ignore_class_) {
    // An ignored label may lie outside [0, classes) (padding as -1): it reads class 0, and its
    // loss is then multiplied by 0, as Keras does (its value is finite, so no NaN reaches the
    // gradient).
    kept = mask(y_true, y_pred);
    labels = ops::where(kept, labels, ops::scalar_like(labels, 0.0));
  }
  std::int64_t classes = y_pred.shape().back();
  ops::check_indices(labels, 0, classes,
                     str(loss, ": label {} is out of range for ", classes,
                         " classes; expected labels in [0, ", classes, ")",
                         ignore_class_ ? str(" or the ignore_class ", *ignore_class_) : std::string()));
  Tensor picked = ops::one_hot(labels, classes, y_pred.dtype()) *
                  log_probabilities(y_pred, from_logits_);
  Tensor losses = -ops::sum(picked, {-1});
  return kept.defined() ? losses * ops::cast(kept, losses.dtype()) : losses;
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

CategoricalCrossentropy::CategoricalCrossentropy(bool from_logits, double label_smoothing, Reduction reduction)
    : Loss(reduction), from_logits_(from_logits), label_smoothing_(label_smoothing) {
  check_smoothing(label_smoothing, "categorical_crossentropy");
}

BinaryCrossentropy::BinaryCrossentropy(bool from_logits, double label_smoothing, Reduction reduction)
    : Loss(reduction), from_logits_(from_logits), label_smoothing_(label_smoothing) {
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

Huber::Huber(double delta, Reduction reduction) : Loss(reduction), delta_(delta) {
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
