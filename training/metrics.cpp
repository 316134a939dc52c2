// Metric updates (computed outside autograd).
#include "training/metrics.h"

#include <cmath>
#include <limits>

#include "engine/errors.h"
#include "engine/losses.h"
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

void RunningTotal::add_term(const Tensor& value, double scale) {
  if (value.size() != 1) {
    throw ShapeError(str("RunningTotal::add_term: a term must have one element, got shape ",
                         shape_to_string(value.shape())));
  }
  pending_.push_back({value.detach(), scale});
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

void Metric::reset_state() {
  numerator_.reset();
  device_denominator_.reset();
}

void Metric::set_state(double numerator, double denominator) {
  reset_state();
  add_to_state(numerator, denominator);
}

void Metric::set_state(const std::vector<double>& state) {
  reset_state();
  add_to_state(state);
}

void Metric::add_to_state(const std::vector<double>& totals) {
  if (totals.size() != state_size()) {
    throw ValueError(str("metric '", name(), "': a state of ", totals.size(), " numbers; it has ", state_size()));
  }
  add_to_state(totals[0], totals[1]);
}

void Metric::add_batch(const Tensor& numerator, const Tensor& denominator) {
  numerator_.add_term(numerator, 1.0);
  device_denominator_.add_term(denominator, 1.0);
}

void Metric::add_weighted_values(const Tensor& values, const Tensor& sample_weight) {
  Tensor numbers = ops::cast(values, float64);
  if (!sample_weight.defined()) {
    add_batch(ops::sum(numbers), 1.0, static_cast<double>(numbers.size()));
    return;
  }
  Tensor weights = ops::broadcast_to(losses::sample_weights_like(sample_weight, numbers, name()), numbers.shape());
  add_batch(ops::sum(numbers * weights), ops::sum(weights));
}

namespace {
// Set while the default update_state of one form calls the other: a metric that overrides
// neither would otherwise call them in turn for ever.
thread_local const Metric* forwarding_update = nullptr;

struct ForwardingUpdate {
  explicit ForwardingUpdate(const Metric* metric) {
    if (forwarding_update == metric) {
      throw ValueError(str("metric '", metric->name(), "' overrides neither update_state(y_true, y_pred) nor ",
                           "update_state(y_true, y_pred, sample_weight); a metric must override one"));
    }
    previous = forwarding_update;
    forwarding_update = metric;
  }
  ~ForwardingUpdate() { forwarding_update = previous; }
  const Metric* previous;
};
}  // namespace

void Metric::update_state(const Tensor& y_true, const Tensor& y_pred) {
  ForwardingUpdate guard(this);
  update_state(y_true, y_pred, Tensor());
}

void Metric::update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) {
  if (sample_weight.defined()) {
    throw ValueError(str("metric '", name(), "' takes no sample weights: override update_state(y_true, y_pred, ",
                         "sample_weight) to use it in weighted_metrics"));
  }
  ForwardingUpdate guard(this);
  update_state(y_true, y_pred);
}

namespace {
double batch_size_of(const Tensor& y_pred) {
  return y_pred.rank() == 0 ? 1.0 : static_cast<double>(y_pred.dim(0));
}

Tensor count_of(const Tensor& condition) { return ops::sum(ops::cast(condition, float64)); }

Tensor as_float64(const Tensor& x) { return ops::cast(x, float64); }

void check_same_shape(const char* metric, const Tensor& y_true, const Tensor& y_pred) {
  if (y_true.shape() != y_pred.shape()) {
    throw ShapeError(str(metric, ": labels of shape ", shape_to_string(y_true.shape()), " and predictions of shape ",
                         shape_to_string(y_pred.shape()), " must have the same shape"));
  }
}

// Class indices of shape (batch,) from (batch,) or (batch, 1).
Tensor class_indices(const Tensor& y_true, const Tensor& y_pred) {
  Tensor labels = y_true;
  if (labels.rank() == y_pred.rank() && labels.shape().back() == 1) labels = ops::squeeze(labels, -1);
  return ops::cast(labels, int64);
}

// Whether each row's label is among its k highest scores (fewer than k scores above it).
Tensor in_top_k(const Tensor& labels, const Tensor& y_pred, std::int64_t k) {
  Tensor scores = as_float64(y_pred);
  Tensor label_score = ops::sum(ops::one_hot(labels, y_pred.shape().back(), float64) * scores, {-1}, true);
  Tensor above = ops::sum(as_float64(ops::greater(scores, label_score)), {-1});
  return ops::less(above, ops::scalar_like(above, double(k)));
}

// Sample weights broadcast to every element of `values` (float64); undefined stays undefined.
Tensor element_weights(const Tensor& sample_weight, const Tensor& values, const char* metric) {
  if (!sample_weight.defined()) return Tensor();
  Tensor weights = losses::sample_weights_like(sample_weight, as_float64(values), metric);
  return ops::broadcast_to(weights, values.shape());
}

// The number of true elements, or the sum of their weights.
Tensor weighted_count(const Tensor& condition, const Tensor& weights) {
  return weights.defined() ? ops::sum(as_float64(condition) * weights) : count_of(condition);
}

// Keras' per-sample values of an error metric: the mean over the last axis (none for rank 1).
Tensor per_sample_mean(const Tensor& values) { return values.rank() > 1 ? ops::mean(values, {-1}) : values; }

// (predicted positive, actually positive) masks of a binary metric.
std::pair<Tensor, Tensor> positives(const char* metric, const Tensor& y_true, const Tensor& y_pred, double threshold) {
  check_same_shape(metric, y_true, y_pred);
  Tensor predicted = ops::greater(as_float64(y_pred), ops::scalar_like(as_float64(y_pred), threshold));
  Tensor actual = ops::greater(as_float64(y_true), ops::scalar_like(as_float64(y_true), 0.5));
  return {predicted, actual};
}
}  // namespace

void Mean::update_state(const Tensor& values) {
  NoGradGuard no_grad;
  // As Keras: values of rank > 1 are averaged per sample first; each sample counts once.
  Tensor per_sample = as_float64(values);
  if (per_sample.rank() > 1) {
    ops::Axes trailing;
    for (std::int64_t axis = 1; axis < per_sample.rank(); ++axis) trailing.push_back(axis);
    per_sample = ops::mean(per_sample, trailing);
  }
  add_batch(ops::sum(per_sample), 1.0, static_cast<double>(per_sample.size()));
}

void Mean::update_state(const Tensor& value, double sample_weight) {
  if (value.size() != 1) {
    throw ShapeError(str("Mean '", name(), "': a weighted update takes one value, got shape ",
                         shape_to_string(value.shape()), "; call update_state(values) for several"));
  }
  if (!std::isfinite(sample_weight) || sample_weight < 0) {
    throw ValueError(str("Mean '", name(), "': sample_weight must be a finite number >= 0, got ", sample_weight));
  }
  if (sample_weight == 0) return;
  NoGradGuard no_grad;
  add_batch(ops::reshape(as_float64(value), {}), sample_weight, sample_weight);
}

void Mean::update_state(const Tensor& y_true, const Tensor& y_pred) { update_state(y_true, y_pred, Tensor()); }

void Mean::update_state(const Tensor&, const Tensor&, const Tensor&) {
  throw ValueError(str("Mean '", name(), "' averages values: call update_state(values); as a compiled metric ",
                       "it has no meaning for (y_true, y_pred)"));
}

void Sum::update_state(const Tensor& values) {
  NoGradGuard no_grad;
  add_batch(ops::sum(as_float64(values)), 1.0, static_cast<double>(values.size()));
}

void Sum::update_state(const Tensor& y_true, const Tensor& y_pred) { update_state(y_true, y_pred, Tensor()); }

void Sum::update_state(const Tensor&, const Tensor&, const Tensor&) {
  throw ValueError(str("Sum '", name(), "' adds values: call update_state(values); as a compiled metric ",
                       "it has no meaning for (y_true, y_pred)"));
}

void Accuracy::update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) {
  NoGradGuard no_grad;
  check_same_shape("accuracy", y_true, y_pred);
  // Keras compares element by element: each element is a value of the mean.
  add_weighted_values(ops::equal(as_float64(y_true), as_float64(y_pred)), sample_weight);
}

BinaryAccuracy::BinaryAccuracy(std::string name, double threshold) : Metric(std::move(name)), threshold_(threshold) {
  if (!(threshold >= 0 && threshold <= 1)) {
    throw ValueError(str("binary_accuracy: threshold must be in [0, 1], got ", threshold));
  }
}

void BinaryAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) {
  NoGradGuard no_grad;
  auto [predicted, actual] = positives("binary_accuracy", y_true, y_pred, threshold_);
  // Element by element: with per-sample weights the same as Keras' per-sample mean over the
  // last axis, weighted (every sample has as many elements); per-element weights work too.
  add_weighted_values(ops::equal(as_float64(predicted), as_float64(y_true)), sample_weight);
}

void SparseCategoricalAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) {
  NoGradGuard no_grad;
  Tensor predicted = ops::argmax(y_pred, -1);
  add_weighted_values(ops::equal(predicted, class_indices(y_true, y_pred)), sample_weight);
}

void CategoricalAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) {
  NoGradGuard no_grad;
  add_weighted_values(ops::equal(ops::argmax(y_pred, -1), ops::argmax(y_true, -1)), sample_weight);
}

TopKCategoricalAccuracy::TopKCategoricalAccuracy(std::int64_t k, std::string name) : Metric(std::move(name)), k_(k) {
  if (k < 1) throw ValueError(str("top_k_categorical_accuracy: k must be >= 1, got ", k));
}

void TopKCategoricalAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) {
  NoGradGuard no_grad;
  check_same_shape("top_k_categorical_accuracy", y_true, y_pred);
  add_weighted_values(in_top_k(ops::argmax(y_true, -1), y_pred, k_), sample_weight);
}

SparseTopKCategoricalAccuracy::SparseTopKCategoricalAccuracy(std::int64_t k, std::string name)
    : Metric(std::move(name)), k_(k) {
  if (k < 1) throw ValueError(str("sparse_top_k_categorical_accuracy: k must be >= 1, got ", k));
}

void SparseTopKCategoricalAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred,
                                                 const Tensor& sample_weight) {
  NoGradGuard no_grad;
  add_weighted_values(in_top_k(class_indices(y_true, y_pred), y_pred, k_), sample_weight);
}

namespace {
void check_rule(const PositiveRule& rule, const char* metric) {
  if (rule.threshold && !(*rule.threshold >= 0 && *rule.threshold <= 1)) {
    throw ValueError(str(metric, ": threshold must be in [0, 1], got ", *rule.threshold));
  }
  if (rule.top_k && *rule.top_k < 1) throw ValueError(str(metric, ": top_k must be >= 1, got ", *rule.top_k));
  if (rule.class_id && *rule.class_id < 0) throw ValueError(str(metric, ": class_id must be >= 0, got ", *rule.class_id));
}

// (true positives, the denominator's positives: predicted for Precision, actual for Recall),
// as weighted counts, under the rule.
std::pair<Tensor, Tensor> confusion_counts(const char* metric, const PositiveRule& rule, bool precision,
                                           const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) {
  check_same_shape(metric, y_true, y_pred);
  Tensor scores = as_float64(y_pred), labels = as_float64(y_true);
  const std::int64_t classes = y_pred.rank() == 0 ? 1 : y_pred.shape().back();
  Tensor in_top;  // whether each prediction is among its row's top_k
  if (rule.top_k) {
    if (y_pred.rank() < 1) throw ShapeError(str(metric, ": top_k needs predictions with a class axis"));
    Shape column = scores.shape(), row = scores.shape();
    column.push_back(1);
    row.insert(row.end() - 1, 1);
    // How many of the row's predictions exceed each one: fewer than k means it is in the top k.
    Tensor exceeding = ops::sum(as_float64(ops::greater(ops::reshape(scores, row), ops::reshape(scores, column))), {-1});
    in_top = ops::less(exceeding, ops::scalar_like(exceeding, double(*rule.top_k)));
  }
  Tensor weights = element_weights(sample_weight, y_pred, metric);
  if (rule.class_id) {
    if (*rule.class_id >= classes) {
      throw ValueError(str(metric, ": class_id ", *rule.class_id, " for predictions of ", classes,
                           " classes; expected a class_id in [0, ", classes, ")"));
    }
    auto column_of = [&](const Tensor& x) {
      Shape starts(static_cast<std::size_t>(x.rank()), 0), sizes = x.shape();
      starts.back() = *rule.class_id;
      sizes.back() = 1;
      return ops::slice(x, starts, sizes);
    };
    scores = column_of(scores);
    labels = column_of(labels);
    if (in_top.defined()) in_top = column_of(in_top);
    if (weights.defined()) weights = column_of(weights);
  }
  // Keras: 0.5 by default; with top_k, minus infinity (every one of the top k is positive).
  const double threshold =
      rule.threshold ? *rule.threshold : (rule.top_k ? -std::numeric_limits<double>::infinity() : 0.5);
  Tensor predicted = ops::greater(scores, ops::scalar_like(scores, threshold));
  if (in_top.defined()) predicted = ops::logical_and(predicted, in_top);
  Tensor actual = ops::greater(labels, ops::scalar_like(labels, 0.5));
  return {weighted_count(ops::logical_and(predicted, actual), weights),
          weighted_count(precision ? predicted : actual, weights)};
}
}  // namespace

Precision::Precision(std::optional<double> threshold, std::string name, std::optional<std::int64_t> top_k,
                     std::optional<std::int64_t> class_id)
    : Metric(std::move(name)), rule_{threshold, top_k, class_id} {
  check_rule(rule_, "precision");
}

void Precision::update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) {
  NoGradGuard no_grad;
  auto [true_positives, predicted] = confusion_counts("precision", rule_, true, y_true, y_pred, sample_weight);
  add_batch(true_positives, predicted);
}

Recall::Recall(std::optional<double> threshold, std::string name, std::optional<std::int64_t> top_k,
               std::optional<std::int64_t> class_id)
    : Metric(std::move(name)), rule_{threshold, top_k, class_id} {
  check_rule(rule_, "recall");
}

void Recall::update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) {
  NoGradGuard no_grad;
  auto [true_positives, actual] = confusion_counts("recall", rule_, false, y_true, y_pred, sample_weight);
  add_batch(true_positives, actual);
}

void MeanSquaredError::update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) {
  NoGradGuard no_grad;
  Tensor difference = as_float64(y_pred) - as_float64(y_true);
  if (!sample_weight.defined()) {
    add_batch(ops::mean(ops::square(difference)), batch_size_of(y_pred), batch_size_of(y_pred));
    return;
  }
  add_weighted_values(per_sample_mean(ops::square(difference)), sample_weight);
}

void MeanAbsoluteError::update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) {
  NoGradGuard no_grad;
  Tensor difference = as_float64(y_pred) - as_float64(y_true);
  if (!sample_weight.defined()) {
    add_batch(ops::mean(ops::abs(difference)), batch_size_of(y_pred), batch_size_of(y_pred));
    return;
  }
  add_weighted_values(per_sample_mean(ops::abs(difference)), sample_weight);
}

AUC::AUC(int num_thresholds, std::string curve, std::string summation_method, std::string name, bool from_logits,
         bool multi_label, std::int64_t num_labels, std::vector<double> label_weights)
    : Metric(std::move(name)), curve_(std::move(curve)), summation_method_(std::move(summation_method)),
      from_logits_(from_logits), multi_label_(multi_label), label_weights_(std::move(label_weights)) {
  if (multi_label_ && num_labels < 1) {
    throw ValueError(str("AUC: multi_label needs num_labels >= 1 (the state's size is fixed before any data), got ",
                         num_labels));
  }
  if (!multi_label_ && num_labels != 0) {
    throw ValueError(str("AUC: num_labels is for multi_label only; got num_labels=", num_labels,
                         " without multi_label (give 0, or set multi_label)"));
  }
  if (multi_label_) labels_ = num_labels;
  if (multi_label_ && !label_weights_.empty() && static_cast<std::int64_t>(label_weights_.size()) != labels_) {
    throw ValueError(str("AUC: ", label_weights_.size(), " label_weights for num_labels=", labels_,
                         "; expected one per label"));
  }
  for (double weight : label_weights_) {
    if (!std::isfinite(weight) || weight < 0) {
      throw ValueError(str("AUC: label_weights must be finite numbers >= 0, got ", weight));
    }
  }
  if (num_thresholds <= 1) throw ValueError(str("AUC: num_thresholds must be > 1, got ", num_thresholds));
  if (curve_ != "ROC" && curve_ != "PR") throw ValueError(str("AUC: curve must be \"ROC\" or \"PR\", got \"", curve_, "\""));
  if (summation_method_ != "interpolation" && summation_method_ != "minoring" && summation_method_ != "majoring") {
    throw ValueError(str("AUC: summation_method must be \"interpolation\", \"minoring\" or \"majoring\", got \"",
                         summation_method_, "\""));
  }
  // Keras' thresholds: just below 0, (i + 1) / (n - 1) for i < n - 2, just above 1.
  constexpr double kEpsilon = 1e-7;
  thresholds_.push_back(0.0 - kEpsilon);
  for (int i = 0; i < num_thresholds - 2; ++i) thresholds_.push_back(double(i + 1) / double(num_thresholds - 1));
  thresholds_.push_back(1.0 + kEpsilon);
  host_counts_.assign(state_size(), 0.0);
}

void AUC::reset_state() {
  Metric::reset_state();
  counts_ = Tensor();
  host_counts_.assign(state_size(), 0.0);
}

void AUC::update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) {
  NoGradGuard no_grad;
  if (y_true.size() != y_pred.size()) {
    throw ShapeError(str("AUC: labels of shape ", shape_to_string(y_true.shape()), " and predictions of shape ",
                         shape_to_string(y_pred.shape()), " must have as many elements"));
  }
  const std::int64_t columns = y_pred.rank() == 0 ? 1 : y_pred.shape().back();
  if (multi_label_ && (y_pred.rank() != 2 || columns != labels_)) {
    throw ShapeError(str("AUC: multi_label with ", labels_, " labels takes predictions of shape (batch, ", labels_,
                         "), got ", shape_to_string(y_pred.shape())));
  }
  if (!label_weights_.empty() && static_cast<std::int64_t>(label_weights_.size()) != columns) {
    throw ShapeError(str("AUC: ", label_weights_.size(), " label_weights for predictions of shape ",
                         shape_to_string(y_pred.shape()), "; expected one per label (", columns, ")"));
  }
  // Each element weighs its sample's weight and, without multi_label, its column's label
  // weight (with multi_label the label weights weigh the areas instead).
  Tensor weights = sample_weight.defined() ? element_weights(sample_weight, ops::reshape(y_pred, y_true.shape()), "AUC")
                                           : Tensor();
  if (!multi_label_ && !label_weights_.empty()) {
    Tensor by_column = Tensor::from_vector(label_weights_, {columns}).to(y_pred.device());
    weights = weights.defined() ? ops::reshape(weights, y_pred.shape()) * by_column
                                : ops::broadcast_to(by_column, y_pred.shape());
  }
  // (rows, curves, 1): every element a row of one curve, or with multi_label each label a curve.
  const std::int64_t curves = multi_label_ ? labels_ : 1;
  const Shape rows_of_curves = {y_pred.size() / curves, curves, 1};
  Tensor scores = ops::reshape(as_float64(y_pred), rows_of_curves);
  if (from_logits_) scores = ops::sigmoid(scores);
  Tensor labels = ops::reshape(as_float64(y_true), rows_of_curves);
  const auto count = static_cast<std::int64_t>(thresholds_.size());
  Tensor thresholds = Tensor::from_vector(thresholds_, {1, 1, count}).to(scores.device());
  Tensor above = as_float64(ops::greater(scores, thresholds));  // (rows, curves, thresholds)
  Tensor below = 1.0 - above;
  Tensor negatives = 1.0 - labels;
  if (weights.defined()) {
    Tensor per_element = ops::reshape(weights, rows_of_curves);
    labels = labels * per_element;
    negatives = negatives * per_element;
  }
  const Shape block = {curves, 1, count};
  Tensor batch = ops::concatenate({ops::reshape(ops::sum(labels * above, {0}), block),
                                   ops::reshape(ops::sum(negatives * above, {0}), block),
                                   ops::reshape(ops::sum(negatives * below, {0}), block),
                                   ops::reshape(ops::sum(labels * below, {0}), block)},
                                  1);
  counts_ = counts_.defined() && counts_.device() == batch.device() ? counts_ + batch
            : counts_.defined()                                      ? counts_.to(batch.device()) + batch
                                                                     : batch;
}

std::vector<double> AUC::state() const {
  std::vector<double> totals = host_counts_;
  if (counts_.defined()) {
    std::vector<double> counted = counts_.to(Device::cpu()).to_vector<double>();
    for (std::size_t i = 0; i < totals.size(); ++i) totals[i] += counted[i];
  }
  return totals;
}

void AUC::set_state(const std::vector<double>& state) {
  reset_state();
  add_to_state(state);
}

void AUC::add_to_state(const std::vector<double>& totals) {
  if (totals.size() != state_size()) {
    throw ValueError(str("AUC '", name(), "': a state of ", totals.size(), " numbers; it has ", state_size(),
                         " (four counts at each of ", thresholds_.size(), " thresholds, for ", labels_, " label(s))"));
  }
  for (std::size_t i = 0; i < totals.size(); ++i) host_counts_[i] += totals[i];
}

double AUC::result_from(const std::vector<double>& state) const {
  if (state.size() != state_size()) {
    throw ValueError(str("AUC '", name(), "': a state of ", state.size(), " numbers; it has ", state_size()));
  }
  if (!multi_label_) return area_of(state.data());
  // Keras: the mean of the labels' areas, or their label_weights-weighted mean.
  double weighted = 0.0, total = 0.0;
  for (std::int64_t label = 0; label < labels_; ++label) {
    const double weight = label_weights_.empty() ? 1.0 : label_weights_[static_cast<std::size_t>(label)];
    weighted += weight * area_of(state.data() + 4 * thresholds_.size() * static_cast<std::size_t>(label));
    total += weight;
  }
  return total > 0 ? weighted / total : 0.0;
}

double AUC::area_of(const double* counts) const {
  const std::size_t n = thresholds_.size();
  const double* tp = counts;
  const double* fp = tp + n;
  const double* tn = fp + n;
  const double* fn = tn + n;
  auto divide_no_nan = [](double a, double b) { return b == 0.0 ? 0.0 : a / b; };
  double area = 0.0;
  if (curve_ == "PR" && summation_method_ == "interpolation") {
    // Davis and Goadrich's interpolation between the thresholds, as Keras' interpolate_pr_auc.
    for (std::size_t i = 0; i + 1 < n; ++i) {
      const double dtp = tp[i] - tp[i + 1];
      const double p_here = tp[i] + fp[i], p_next = tp[i + 1] + fp[i + 1];
      const double slope = divide_no_nan(dtp, std::max(p_here - p_next, 0.0));
      const double intercept = tp[i + 1] - slope * p_next;
      const double ratio = p_here > 0 && p_next > 0 ? divide_no_nan(p_here, std::max(p_next, 0.0)) : 1.0;
      area += divide_no_nan(slope * (dtp + intercept * std::log(ratio)), std::max(tp[i + 1] + fn[i + 1], 0.0));
    }
    return area;
  }
  std::vector<double> x(n), y(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double recall = divide_no_nan(tp[i], tp[i] + fn[i]);
    if (curve_ == "ROC") {
      x[i] = divide_no_nan(fp[i], fp[i] + tn[i]);
      y[i] = recall;
    } else {
      x[i] = recall;
      y[i] = divide_no_nan(tp[i], tp[i] + fp[i]);
    }
  }
  for (std::size_t i = 0; i + 1 < n; ++i) {
    const double height = summation_method_ == "interpolation" ? (y[i] + y[i + 1]) / 2.0
                          : summation_method_ == "minoring"    ? std::min(y[i], y[i + 1])
                                                               : std::max(y[i], y[i + 1]);
    area += (x[i] - x[i + 1]) * height;
  }
  return area;
}

double RootMeanSquaredError::result_of(double numerator, double denominator) const {
  return denominator > 0 ? std::sqrt(numerator / denominator) : 0.0;
}

MetricPtr get(const std::string& name, LabelKind labels) {
  if (name == "accuracy" || name == "acc") {
    if (labels == LabelKind::sparse) return std::make_shared<SparseCategoricalAccuracy>(name);
    if (labels == LabelKind::binary) return std::make_shared<BinaryAccuracy>(name);
    return std::make_shared<CategoricalAccuracy>(name);
  }
  if (name == "sparse_categorical_accuracy") return std::make_shared<SparseCategoricalAccuracy>();
  if (name == "categorical_accuracy") return std::make_shared<CategoricalAccuracy>();
  if (name == "binary_accuracy") return std::make_shared<BinaryAccuracy>();
  if (name == "top_k_categorical_accuracy") return std::make_shared<TopKCategoricalAccuracy>();
  if (name == "sparse_top_k_categorical_accuracy") return std::make_shared<SparseTopKCategoricalAccuracy>();
  if (name == "precision") return std::make_shared<Precision>();
  if (name == "recall") return std::make_shared<Recall>();
  if (name == "mean_squared_error" || name == "mse") return std::make_shared<MeanSquaredError>(name);
  if (name == "mean_absolute_error" || name == "mae") return std::make_shared<MeanAbsoluteError>(name);
  if (name == "root_mean_squared_error") return std::make_shared<RootMeanSquaredError>();
  if (name == "auc") return std::make_shared<AUC>();
  throw ValueError(str("unknown metric '", name,
                       "'; expected one of accuracy, binary_accuracy, sparse_categorical_accuracy, ",
                       "categorical_accuracy, top_k_categorical_accuracy, sparse_top_k_categorical_accuracy, ",
                       "precision, recall, mean_squared_error (mse), mean_absolute_error (mae), ",
                       "root_mean_squared_error, auc, or a metric object"));
}

}  // namespace keras::metrics

namespace keras {
MetricSpec::MetricSpec(metrics::MetricPtr metric) : object_(std::move(metric)) {
  if (!object_) throw ValueError("compile: a metric is null");
  name_ = object_->name();
}
}  // namespace keras
