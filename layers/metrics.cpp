// Metric updates (computed outside autograd).
#include "layers/metrics.h"

#include "engine/errors.h"
#include "engine/ops.h"

namespace keras::metrics {
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
  add(ops::sum(ops::cast(correct, float64)).item(), static_cast<double>(predicted.size()));
}

void CategoricalAccuracy::update(const Tensor& y_true, const Tensor& y_pred) {
  NoGradGuard no_grad;
  Tensor correct = ops::equal(ops::argmax(y_pred, -1), ops::argmax(y_true, -1));
  add(ops::sum(ops::cast(correct, float64)).item(), static_cast<double>(correct.size()));
}

void MeanSquaredError::update(const Tensor& y_true, const Tensor& y_pred) {
  NoGradGuard no_grad;
  Tensor difference = ops::cast(y_pred, float64) - ops::cast(y_true, float64);
  double per_sample = ops::mean(ops::square(difference)).item();
  add(per_sample * batch_size_of(y_pred), batch_size_of(y_pred));
}

void MeanAbsoluteError::update(const Tensor& y_true, const Tensor& y_pred) {
  NoGradGuard no_grad;
  Tensor difference = ops::cast(y_pred, float64) - ops::cast(y_true, float64);
  double per_sample = ops::mean(ops::abs(difference)).item();
  add(per_sample * batch_size_of(y_pred), batch_size_of(y_pred));
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
