// Metrics accumulated over an epoch as (sum, count) and reported as their mean, as Keras does.
// Their batch sums stay on the batch's device until read (RunningTotal).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace keras::metrics {

// A running (sum, count) whose terms may be scalars left on a device. On a GPU, reading a value
// makes the host wait for the device; a step that read its loss and metrics would wait every
// step. So a batch's term stays where it was computed and the terms are read together (one copy)
// when sum() is asked for. fit() and evaluate() ask at their logs, and at the latest after
// kReadAfterTerms batches, at a batch all processes agree on (a read may raise a GPU's deferred
// error, which they share). kMaxPendingTerms is the backstop for other callers: add() reads
// the terms itself then. The sum is formed on the host in the order the terms came, as when
// each was read at once.
class RunningTotal {
 public:
  void add(double sum, double count);
  // Adds value * scale to the sum and `count` to the count; `value` is a one-element tensor
  // on any device. A term of count 0 is dropped (its value may be the NaN mean of no rows).
  void add(const Tensor& value, double scale, double count);
  double sum() const;
  double count() const { return count_; }
  std::size_t pending_terms() const { return pending_.size(); }
  void reset();

  static constexpr std::size_t kReadAfterTerms = 512;
  static constexpr std::size_t kMaxPendingTerms = 4096;

 private:
  struct Term {
    Tensor value;
    double scale;
  };
  void read_pending() const;
  mutable std::vector<Term> pending_;
  mutable double sum_ = 0.0;
  double count_ = 0.0;
};

class Metric {
 public:
  explicit Metric(std::string name) : name_(std::move(name)) {}
  virtual ~Metric() = default;
  // Adds one batch; returns nothing, call result() for the running mean. Nothing waits for
  // the batch's device here: see RunningTotal.
  virtual void update(const Tensor& y_true, const Tensor& y_pred) = 0;
  void add(double sum, double count) { total_.add(sum, count); }
  double result() const { return total_.count() > 0 ? total_.sum() / total_.count() : 0.0; }
  double sum() const { return total_.sum(); }
  double count() const { return total_.count(); }
  void reset() { total_.reset(); }
  const std::string& name() const { return name_; }

 protected:
  // value * scale joins the sum, `count` the count (value stays on its device until read).
  void add_batch(const Tensor& value, double scale, double count) {
    total_.add(value, scale, count);
  }

 private:
  std::string name_;
  RunningTotal total_;
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
