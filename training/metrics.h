// Metric objects with Keras' interface (update_state, result, reset_state; subclass Metric for
// your own) and the built-in metrics with Keras' names and formulas. A metric's state is a
// ratio, (numerator, denominator): an accuracy's (right, seen), Precision's (true positives,
// predicted positives). Under a distribution fit() and evaluate() sum both over the processes
// before result_of, so every process logs the global value, and at the end of each epoch and
// evaluation every process's metric holds that global state (one all-reduce, the logs' own:
// training/trainer.cpp). Batch terms stay on the batch's device until read (RunningTotal).
#pragma once
#include <concepts>
#include <cstddef>
#include <memory>
#include <optional>
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
  // Adds value * scale to the sum, nothing to the count.
  void add_term(const Tensor& value, double scale);
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
  // Adds one batch. Nothing waits for the batch's device here: see RunningTotal. A metric of
  // one's own overrides one of the two: this one, or the next to take sample weights too.
  virtual void update_state(const Tensor& y_true, const Tensor& y_pred);
  // Keras' update_state(y_true, y_pred, sample_weight): each sample (or value) weighs its
  // weight (shape (batch,) or (batch, 1), or the values' shape), as compile's weighted_metrics
  // are updated. Undefined weights: every value weighs 1. The default refuses weights (a metric
  // that overrides only the two-argument update_state does not know what to do with them).
  virtual void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight);
  // The value of a state; the default is the mean, numerator / denominator (0 before any data).
  virtual double result_of(double numerator, double denominator) const {
    return denominator > 0 ? numerator / denominator : 0.0;
  }
  double result() const { return result_from(state()); }
  virtual void reset_state();
  double numerator() const { return numerator_.sum(); }
  double denominator() const { return numerator_.count() + device_denominator_.sum(); }
  // Adds to the state from numbers (a resumed run's totals); set_state replaces it.
  void add_to_state(double numerator, double denominator) { numerator_.add(numerator, denominator); }
  void set_state(double numerator, double denominator);

  // The state as numbers that add up across batches and processes, which fit and evaluate sum
  // over the data-parallel processes: by default the ratio's (numerator, denominator). A metric
  // with a larger state (AUC: four confusion counts per threshold) overrides these five.
  virtual std::size_t state_size() const { return 2; }
  virtual std::vector<double> state() const { return {numerator(), denominator()}; }
  virtual void set_state(const std::vector<double>& state);
  virtual void add_to_state(const std::vector<double>& totals);
  virtual double result_from(const std::vector<double>& state) const { return result_of(state.at(0), state.at(1)); }
  std::size_t pending_terms() const { return numerator_.pending_terms() + device_denominator_.pending_terms(); }
  const std::string& name() const { return name_; }

 protected:
  // value * scale joins the numerator, `denominator` the denominator (value stays on its device).
  void add_batch(const Tensor& value, double scale, double denominator) { numerator_.add(value, scale, denominator); }
  // Both terms computed on the device (Precision's predicted positives).
  void add_batch(const Tensor& numerator, const Tensor& denominator);
  // Keras' weighted mean of a batch's values (per sample or per element): sum(values * w) joins
  // the numerator and sum(w) the denominator, w the sample weights broadcast to the values
  // (1 for each value when undefined).
  void add_weighted_values(const Tensor& values, const Tensor& sample_weight);

 private:
  std::string name_;
  RunningTotal numerator_;           // its count holds the denominator's host terms
  RunningTotal device_denominator_;  // the denominator's device terms
};
using MetricPtr = std::shared_ptr<Metric>;

// The mean of the values given to update_state(values) (keras.metrics.Mean); values of rank
// > 1 are averaged over their trailing axes first, so each sample counts once.
class Mean : public Metric {
 public:
  explicit Mean(std::string name = "mean") : Metric(std::move(name)) {}
  void update_state(const Tensor& values);
  // A one-element value that stands for `sample_weight` samples (Keras' update_state(loss,
  // sample_weight=batch_size): a batch's mean loss, weighted by its rows). A weight of 0 adds
  // nothing.
  void update_state(const Tensor& value, double sample_weight);
  // As a compiled metric it has no (y_true, y_pred) meaning: both forms say so.
  void update_state(const Tensor& y_true, const Tensor& y_pred) override;
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) override;
};

// The sum of the values given to update_state(values).
class Sum : public Metric {
 public:
  explicit Sum(std::string name = "sum") : Metric(std::move(name)) {}
  void update_state(const Tensor& values);
  void update_state(const Tensor& y_true, const Tensor& y_pred) override;
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) override;
  double result_of(double numerator, double) const override { return numerator; }
};

// How often y_pred equals y_true exactly (keras.metrics.Accuracy).
class Accuracy : public Metric {
 public:
  explicit Accuracy(std::string name = "accuracy") : Metric(std::move(name)) {}
  using Metric::update_state;
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) override;
};

// How often (y_pred > threshold) equals the 0/1 label, over every element.
class BinaryAccuracy : public Metric {
 public:
  explicit BinaryAccuracy(std::string name = "binary_accuracy", double threshold = 0.5);
  using Metric::update_state;
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) override;

 private:
  double threshold_;
};

// Labels are class indices; a sample is right when argmax(y_pred) equals the label.
class SparseCategoricalAccuracy : public Metric {
 public:
  explicit SparseCategoricalAccuracy(std::string name = "sparse_categorical_accuracy")
      : Metric(std::move(name)) {}
  using Metric::update_state;
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) override;
};

// Labels are one-hot; right when argmax(y_pred) == argmax(y_true).
class CategoricalAccuracy : public Metric {
 public:
  explicit CategoricalAccuracy(std::string name = "categorical_accuracy") : Metric(std::move(name)) {}
  using Metric::update_state;
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) override;
};

// Right when the label's score is among the k largest (fewer than k scores exceed it, as
// Keras' in_top_k counts ties). Labels one-hot here, class indices in the sparse one.
class TopKCategoricalAccuracy : public Metric {
 public:
  explicit TopKCategoricalAccuracy(std::int64_t k = 5, std::string name = "top_k_categorical_accuracy");
  using Metric::update_state;
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) override;

 private:
  std::int64_t k_;
};

class SparseTopKCategoricalAccuracy : public Metric {
 public:
  explicit SparseTopKCategoricalAccuracy(std::int64_t k = 5, std::string name = "sparse_top_k_categorical_accuracy");
  using Metric::update_state;
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) override;

 private:
  std::int64_t k_;
};

// What Precision and Recall count, as Keras' update_confusion_matrix_variables: a prediction
// is positive when above `threshold` (0.5; with top_k and no threshold, every one of the row's
// top_k); with top_k only a row's k largest predictions can be positive (ties at the k-th all
// are); with class_id only that column (the last axis) counts, after top_k is taken. top_k
// compares each prediction with its row's others: batch x classes^2 comparisons an update, fine
// for the tens of labels it is used with (a sort op would make it batch x classes log classes).
struct PositiveRule {
  std::optional<double> threshold = std::nullopt;
  std::optional<std::int64_t> top_k = std::nullopt;
  std::optional<std::int64_t> class_id = std::nullopt;
};

// true positives / predicted positives.
class Precision : public Metric {
 public:
  explicit Precision(std::optional<double> threshold = std::nullopt, std::string name = "precision",
                     std::optional<std::int64_t> top_k = std::nullopt,
                     std::optional<std::int64_t> class_id = std::nullopt);
  using Metric::update_state;
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) override;

 private:
  PositiveRule rule_;
};

// true positives / actual positives.
class Recall : public Metric {
 public:
  explicit Recall(std::optional<double> threshold = std::nullopt, std::string name = "recall",
                  std::optional<std::int64_t> top_k = std::nullopt, std::optional<std::int64_t> class_id = std::nullopt);
  using Metric::update_state;
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) override;

 private:
  PositiveRule rule_;
};

// The area under the ROC or precision-recall curve, as keras.metrics.AUC computes it: true and
// false positives and negatives counted at `num_thresholds` thresholds spread evenly over
// [0, 1] (plus one just below 0 and one just above 1), the curve's area then summed by
// interpolation (or the lower or upper Riemann sum: "minoring", "majoring"). Labels in [0, 1]
// (soft labels count in part), predictions probabilities (logits with from_logits); every
// element counts as one sample, weighing its sample's weight (and its column's label_weight).
// With multi_label, predictions (batch, num_labels) give one curve per label, and the result is
// the mean of their areas (weighted by label_weights when given), as Keras' multi_label AUC; the
// label count must be given here, since the state's size is fixed before any data (the
// processes agree on it). The counts stay on the batch's device until read; under
// DataParallel they join the logs' all-reduce (4 x num_thresholds x labels numbers).
class AUC : public Metric {
 public:
  explicit AUC(int num_thresholds = 200, std::string curve = "ROC", std::string summation_method = "interpolation",
               std::string name = "auc", bool from_logits = false, bool multi_label = false,
               std::int64_t num_labels = 0, std::vector<double> label_weights = {});
  using Metric::update_state;
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) override;
  void reset_state() override;
  std::size_t state_size() const override { return 4 * thresholds_.size() * static_cast<std::size_t>(labels_); }
  // Laid out label by label (one label without multi_label): the true positives at each
  // threshold, then the false positives, the true negatives and the false negatives.
  std::vector<double> state() const override;
  void set_state(const std::vector<double>& state) override;
  void add_to_state(const std::vector<double>& totals) override;
  double result_from(const std::vector<double>& state) const override;
  const std::vector<double>& thresholds() const { return thresholds_; }

 private:
  std::vector<double> thresholds_;
  std::string curve_, summation_method_;
  bool from_logits_;
  bool multi_label_;
  std::int64_t labels_ = 1;           // curves kept: num_labels with multi_label, else 1
  std::vector<double> label_weights_;  // empty: every label weighs 1
  double area_of(const double* counts) const;  // one curve's area, from its 4 x thresholds counts
  Tensor counts_;                  // (labels, 4, thresholds) float64 on the last batch's device; undefined before one
  std::vector<double> host_counts_;  // what set_state and add_to_state gave, added to counts_
};

class MeanSquaredError : public Metric {
 public:
  explicit MeanSquaredError(std::string name = "mean_squared_error") : Metric(std::move(name)) {}
  using Metric::update_state;
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) override;
};

class MeanAbsoluteError : public Metric {
 public:
  explicit MeanAbsoluteError(std::string name = "mean_absolute_error") : Metric(std::move(name)) {}
  using Metric::update_state;
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) override;
};

// sqrt of the mean squared error over everything seen (not the mean of per-batch roots).
class RootMeanSquaredError : public MeanSquaredError {
 public:
  explicit RootMeanSquaredError(std::string name = "root_mean_squared_error") : MeanSquaredError(std::move(name)) {}
  double result_of(double numerator, double denominator) const override;
};

// What the labels of a loss are, which decides what "accuracy" means (as Keras resolves it).
enum class LabelKind { categorical, sparse, binary };

// By Keras name; "accuracy" (or "acc") is sparse, categorical or binary accuracy by the
// loss's labels. Throws ValueError for an unknown name.
MetricPtr get(const std::string& name, LabelKind labels);

}  // namespace keras::metrics

namespace keras {

// A metric given to compile(): a Keras name ("accuracy") or a metric object (its own state,
// reset at each epoch, as Keras resets compiled metrics).
class MetricSpec {
 public:
  MetricSpec(const char* name) : name_(name) {}
  MetricSpec(std::string name) : name_(std::move(name)) {}
  MetricSpec(metrics::MetricPtr metric);
  template <typename M>
    requires std::derived_from<M, metrics::Metric>
  MetricSpec(std::shared_ptr<M> metric) : MetricSpec(metrics::MetricPtr(std::move(metric))) {}
  template <typename M>
    requires std::derived_from<M, metrics::Metric>
  MetricSpec(M metric) : MetricSpec(metrics::MetricPtr(std::make_shared<M>(std::move(metric)))) {}
  const std::string& name() const { return name_; }
  const metrics::MetricPtr& object() const { return object_; }

 private:
  std::string name_;
  metrics::MetricPtr object_;
};

}  // namespace keras
