// Metrics accumulated over an epoch as (sum, count) and reported as their mean, as Keras does.
#pragma once
#include <memory>
#include <string>

#include "engine/tensor.h"

namespace keras::metrics {

class Metric {
 public:
  explicit Metric(std::string name) : name_(std::move(name)) {}
  virtual ~Metric() = default;
  // Adds one batch; returns nothing, call result() for the running mean.
  virtual void update(const Tensor& y_true, const Tensor& y_pred) = 0;
  void add(double sum, double count) {
    sum_ += sum;
    count_ += count;
  }
  double result() const { return count_ > 0 ? sum_ / count_ : 0.0; }
  double sum() const { return sum_; }
  double count() const { return count_; }
  void reset() { sum_ = count_ = 0.0; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  double sum_ = 0.0, count_ = 0.0;
};
using MetricPtr = std::shared_ptr<Metric>;

// Labels are class indices; a sample is right when argmax(y_pred) equals the label.
class SparseCategoricalAccuracy : public Metric {
 public:
  explicit SparseCategoricalAccuracy(std::string name = "sparse_categorical_accuracy")
      : Metric(std::move(name)) {}
  void update(const Tensor& y_true, const Tensor& y_pred) override;
};

// Labels are one-hot; right when argmax(y_pred) == argmax(y_true).
class CategoricalAccuracy : public Metric {
 public:
  explicit CategoricalAccuracy(std::string name = "categorical_accuracy")
      : Metric(std::move(name)) {}
  void update(const Tensor& y_true, const Tensor& y_pred) override;
};

class MeanSquaredError : public Metric {
 public:
  explicit MeanSquaredError(std::string name = "mean_squared_error") : Metric(std::move(name)) {}
  void update(const Tensor& y_true, const Tensor& y_pred) override;
};

class MeanAbsoluteError : public Metric {
 public:
  explicit MeanAbsoluteError(std::string name = "mean_absolute_error")
      : Metric(std::move(name)) {}
  void update(const Tensor& y_true, const Tensor& y_pred) override;
};

// By Keras name. "accuracy" (or "acc") means sparse or categorical accuracy depending on
// whether the loss takes class indices, as Keras resolves it. Throws ValueError otherwise.
MetricPtr get(const std::string& name, bool sparse_labels);

}  // namespace keras::metrics
