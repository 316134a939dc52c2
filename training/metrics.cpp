// Metric updates (computed outside autograd).
#include "training/metrics.h"

#include "engine/errors.h"
#include "engine/ops.h"

namespace keras::metrics {

void RunningTotal::add(double sum, double count) {
  read_pending();  // keeps the terms in order
  sum_ += sum;
  count_ += count;
}

void RunningTotal::add(const Tensor& value, double scale, double count) {
  if (count == 0) return;
  if (value.size() != 1) {
    throw ShapeError(str("RunningTotal::add: a term must have one element, got shape ",
                         shape_to_string(value.shape())));
  }
  pending_.push_back({value.detach(), scale});
  count_ += count;
  if (pending_.size() >= kMaxPendingTerms) read_pending();
}

double RunningTotal::sum() const {
  read_pending();
  return sum_;
}

void RunningTotal::reset() {
  pending_.clear();
  sum_ = count_ = 0.0;
}

void RunningTotal::read_pending() const {
  if (pending_.empty()) return;
  std::vector<double> values;
  bool one_device = true, one_dtype = true;
  for (const Term& term : pending_) {
    one_device = one_device && term.value.device() == pending_.front().value.device();
    one_dtype = one_dtype && term.value.dtype() == pending_.front().value.dtype();
  }
  if (pending_.size() > 1 && one_device && one_dtype) {
    // One copy for all of them: a GPU waits once.
    NoGradGuard no_grad;
    std::vector<Tensor> flat;
    flat.reserve(pending_.size());
    for (const Term& term : pending_) flat.push_back(ops::reshape(term.value, {1}));
    values = ops::concatenate(flat, 0).to_vector<double>();
  } else {
    for (const Term& term : pending_) values.push_back(term.value.item());
  }
  for (std::size_t i = 0; i < pending_.size(); ++i) sum_ += values[i] * pending_[i].scale;
  pending_.clear();
}

namespace {
double batch_size_of(const Tensor& y_pred) {
  return y_pred.rank() == 0 ? 1.0 : static_cast<double>(y_pred.dim(0));
}
}  // namespace

void SparseCategoricalAccuracy::update(const Tensor& y_true, const Tensor& y_pred) {
  NoGradGuard no_grad;
  Tensor labels = y_true;
  if (labels.rank() == y_pred.rank() && labels.shape().back() == 1) labels = ops::squeeze(labels, -1);
  Tensor predicted = ops::argmax(y_pred, -1);
  Tensor correct = ops::equal(predicted, ops::cast(labels, int64));
  add_batch(ops::sum(ops::cast(correct, float64)), 1.0, static_cast<double>(predicted.size()));
}

void CategoricalAccuracy::update(const Tensor& y_true, const Tensor& y_pred) {
  NoGradGuard no_grad;
  Tensor correct = ops::equal(ops::argmax(y_pred, -1), ops::argmax(y_true, -1));
  add_batch(ops::sum(ops::cast(correct, float64)), 1.0, static_cast<double>(correct.size()));
}

void MeanSquaredError::update(const Tensor& y_true, const Tensor& y_pred) {
  NoGradGuard no_grad;
  Tensor difference = ops::cast(y_pred, float64) - ops::cast(y_true, float64);
  add_batch(ops::mean(ops::square(difference)), batch_size_of(y_pred), batch_size_of(y_pred));
}

void MeanAbsoluteError::update(const Tensor& y_true, const Tensor& y_pred) {
  NoGradGuard no_grad;
  Tensor difference = ops::cast(y_pred, float64) - ops::cast(y_true, float64);
  add_batch(ops::mean(ops::abs(difference)), batch_size_of(y_pred), batch_size_of(y_pred));
}

MetricPtr get(const std::string& name, bool sparse_labels) {
  if (name == "accuracy" || name == "acc") {
    if (sparse_labels) return std::make_shared<SparseCategoricalAccuracy>(name);
    return std::make_shared<CategoricalAccuracy>(name);
  }
  if (name == "sparse_categorical_accuracy") return std::make_shared<SparseCategoricalAccuracy>();
  if (name == "categorical_accuracy") return std::make_shared<CategoricalAccuracy>();
  if (name == "mean_squared_error" || name == "mse") return std::make_shared<MeanSquaredError>(name);
  if (name == "mean_absolute_error" || name == "mae") {
    return std::make_shared<MeanAbsoluteError>(name);
  }
  throw ValueError(str("unknown metric '", name,
                       "'; expected one of accuracy, sparse_categorical_accuracy, "
                       "categorical_accuracy, mean_squared_error (mse), mean_absolute_error (mae)"));
}

}  // namespace keras::metrics
