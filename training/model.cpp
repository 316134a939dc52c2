// The Model API: compile, the entry points of training (handed to training/trainer.h) and of
// weight files (saving/weight_files.h), summaries, the optimizer and its state.
#include "training/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "distribution/runtime/gradient_reducer.h"
#include "distribution/runtime/runtime.h"
#include "distribution/sharding/step_context.h"
#include "engine/errors.h"
#include "training/model_summary.h"
#include "training/trainer.h"
#include "saving/keras_archive.h"
#include "saving/weight_files.h"

namespace keras {

Model::Model(const std::string& name, const std::string& default_prefix)
    : Layer(default_prefix, name) {}

Model::Model(const KerasTensor& inputs, const KerasTensor& outputs, const std::string& name)
    : Model(std::vector<KerasTensor>{inputs}, std::vector<KerasTensor>{outputs}, name) {}

Model::Model(std::vector<KerasTensor> inputs, const KerasTensor& output, const std::string& name)
    : Model(std::move(inputs), std::vector<KerasTensor>{output}, name) {}

Model::Model(std::vector<KerasTensor> inputs, std::vector<KerasTensor> outputs, const std::string& name)
    : Layer("functional", name) {
  adopt_graph(std::make_shared<FunctionalGraph>(std::move(inputs), std::move(outputs)));
}

Model::Model(std::vector<KerasTensor> inputs, const std::map<std::string, KerasTensor>& outputs,
             const std::string& name, NamedOutputs)
    : Layer("functional", name) {
  std::vector<KerasTensor> tensors;
  std::vector<std::string> names;
  for (const auto& [output_name, tensor] : outputs) {
    names.push_back(output_name);
    tensors.push_back(tensor);
  }
  adopt_graph(std::make_shared<FunctionalGraph>(std::move(inputs), std::move(tensors), std::move(names)));
}

void Model::adopt_graph(std::shared_ptr<FunctionalGraph> graph) {
  graph_ = std::move(graph);
  for (const LayerPtr& layer : graph_->layers()) track_keeping_path(layer);
  mark_built();
}

Tensor Model::call(const Tensor& inputs, bool training) {
  if (!graph_) {
    throw ValueError(str("model '", name(), "' has no call(): subclass Model and override call, or make a ",
                         "functional Model(inputs, outputs)"));
  }
  if (graph_->inputs().size() != 1 || graph_->outputs().size() != 1) {
    throw ValueError(str("model '", name(), "' takes ", graph_->inputs().size(), " input(s) and gives ",
                         graph_->outputs().size(), " output(s); call it with a vector of inputs: model({a, b})"));
  }
  return graph_->run({inputs}, training).at(0);
}

std::vector<Tensor> Model::call_many(const std::vector<Tensor>& inputs, bool training) {
  if (graph_) return graph_->run(inputs, training);
  if (inputs.size() != 1) {
    throw ValueError(str("model '", name(), "' was given ", inputs.size(), " inputs, but its call() takes one; ",
                         "override call_many for several inputs"));
  }
  return {call(inputs[0], training)};
}

std::vector<Tensor> Model::operator()(const std::vector<Tensor>& inputs, bool training) {
  if (!built() && !inputs.empty() && inputs[0].defined()) build(inputs[0].shape());
  return run_call_many([&] { return call_many(inputs, training); });
}

std::vector<KerasTensor> Model::operator()(const std::vector<KerasTensor>& inputs) & {
  LayerPtr owner = shared_for_graph();
  auto* model = static_cast<Model*>(owner.get());
  return record_layer_call(owner, inputs, [model](const std::vector<Tensor>& values, bool training) {
    return (*model)(values, training);
  });
}

LayerPtr Model::get_layer(const std::string& name) const {
  std::string known;
  for (const LayerPtr& layer : layers()) {
    if (layer->name() == name) return layer;
    known += (known.empty() ? "" : ", ") + layer->name();
  }
  throw ValueError(str("model '", this->name(), "' has no layer named '", name, "'; its layers: ", known));
}

std::vector<std::string> Model::output_names() const {
  return graph_ ? graph_->output_names() : std::vector<std::string>{"output_0"};
}

std::size_t Model::input_count() const { return graph_ ? graph_->inputs().size() : 1; }

std::size_t Model::output_count() const { return graph_ ? graph_->outputs().size() : 1; }

void Model::compile(std::shared_ptr<optimizers::Optimizer> optimizer, LossSpec loss,
                    const std::vector<MetricSpec>& metrics) {
  if (!loss.get()) throw ValueError("compile: loss is null");
  CompileOptions options;
  options.loss = {std::move(loss)};
  if (!metrics.empty()) {
    std::size_t outputs = output_count();
    if (outputs > 1) {
      throw ValueError(str("compile: model '", name(), "' has ", outputs, " outputs; give its metrics per output, ",
                           "as Keras does: compile(optimizer, {.loss = ..., .metrics = {{...}, {...}}})"));
    }
    options.metrics = {metrics};
  }
  compile(std::move(optimizer), options);
}

void Model::compile(const std::string& optimizer, LossSpec loss,
                    const std::vector<MetricSpec>& metrics) {
  compile(optimizers::get(optimizer), std::move(loss), metrics);
}

void Model::compile(const std::string& optimizer, const CompileOptions& options) {
  compile(optimizers::get(optimizer), options);
}

metrics::LabelKind label_kind(const losses::Loss& loss) {
  if (loss.sparse_labels()) return metrics::LabelKind::sparse;
  return loss.binary_labels() ? metrics::LabelKind::binary : metrics::LabelKind::categorical;
}

bool ValidationFrequency::validates_after(int epoch) const {
  if (!listed_) return every_ > 0 && (epoch + 1) % every_ == 0;
  return std::find(epochs_.begin(), epochs_.end(), epoch + 1) != epochs_.end();
}

void ValidationFrequency::check() const {
  if (!listed_ && every_ < 1) {
    throw ValueError(str("fit: validation_freq must be a positive integer (or a list of epochs), got ", every_));
  }
  if (listed_ && epochs_.empty()) throw ValueError("fit: validation_freq lists no epochs; give epochs >= 1, or an integer");
  for (int epoch : epochs_) {
    if (epoch < 1) {
      throw ValueError(str("fit: validation_freq lists the epoch ", epoch, "; epochs are counted from 1, as in Keras"));
    }
  }
}

std::int64_t ValidationFrequency::fingerprint() const {
  if (!listed_) return every_;
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a over the listed epochs (wraps, unsigned)
  for (int epoch : epochs_) hash = (hash ^ static_cast<std::uint64_t>(static_cast<std::uint32_t>(epoch))) * 1099511628211ull;
  return -1 - static_cast<std::int64_t>(hash >> 1);  // negative: never an integer frequency
}

namespace {
// One value per output from a vector in output order or a map by output name (not both).
template <typename T>
std::vector<T> per_output(const char* what, const std::vector<T>& in_order, const std::map<std::string, T>& by_name,
                          const std::vector<std::string>& names, const T& absent, bool one_applies_to_all) {
  if (!in_order.empty() && !by_name.empty()) {
    throw ValueError(str("compile: give ", what, " by output order or by output name, not both"));
  }
  if (!by_name.empty()) {
    std::vector<T> values(names.size(), absent);
    for (const auto& [name, value] : by_name) {
      auto found = std::find(names.begin(), names.end(), name);
      if (found == names.end()) {
        std::string known;
        for (const std::string& output : names) known += (known.empty() ? "" : ", ") + output;
        throw ValueError(str("compile: ", what, " name output '", name, "', but the model's outputs are ", known));
      }
      values[static_cast<std::size_t>(found - names.begin())] = value;
    }
    return values;
  }
  if (in_order.empty()) return std::vector<T>(names.size(), absent);
  if (in_order.size() == 1 && one_applies_to_all) return std::vector<T>(names.size(), in_order[0]);
  if (in_order.size() != names.size()) {
    throw ValueError(str("compile: ", in_order.size(), " ", what, " for a model of ", names.size(),
                         " output(s); give one per output"));
  }
  return in_order;
}
}  // namespace

void Model::compile(std::shared_ptr<optimizers::Optimizer> optimizer, const CompileOptions& options) {
  if (!optimizer) throw ValueError("compile: optimizer is null");
  std::vector<std::string> names = output_names();
  std::vector<LossSpec> losses =
      per_output<LossSpec>("losses", options.loss, options.loss_by_output, names, LossSpec(losses::LossPtr()), true);
  std::vector<losses::LossPtr> chosen;
  for (std::size_t i = 0; i < losses.size(); ++i) {
    // Keras trains an output without a loss if another has one; we ask for every one.
    if (!losses[i].get()) throw ValueError(str("compile: output '", names[i], "' has no loss"));
    chosen.push_back(losses[i].get());
  }
  std::vector<double> weights = per_output<double>("loss weights", options.loss_weights,
                                                   options.loss_weights_by_output, names, 1.0, false);
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (!std::isfinite(weights[i])) {
      throw ValueError(str("compile: the loss weight of output '", names[i], "' must be a finite number, got ", weights[i]));
    }
  }
  std::vector<std::vector<MetricSpec>> metrics = per_output<std::vector<MetricSpec>>(
      "metric lists", options.metrics, options.metrics_by_output, names, {}, false);
  std::vector<std::vector<MetricSpec>> weighted = per_output<std::vector<MetricSpec>>(
      "weighted metric lists", options.weighted_metrics, options.weighted_metrics_by_output, names, {}, false);
  std::vector<std::string> log_names;
  const bool several = names.size() > 1;
  if (several) {
    for (const std::string& output : names) log_names.push_back(output + "_loss");
  }
  std::vector<const metrics::Metric*> objects;
  std::vector<CompiledMetric> compiled;
  // Keras' order: every output's metrics, then every output's weighted metrics.
  for (int pass = 0; pass < 2; ++pass) {
    const auto& lists = pass == 0 ? metrics : weighted;
    for (std::size_t i = 0; i < names.size(); ++i) {
      for (const MetricSpec& metric : lists[i]) {
        if (const auto& object = metric.object()) {
          // One object keeps one state: Keras copies a metric given to several outputs, we ask
          // for one each.
          if (std::find(objects.begin(), objects.end(), object.get()) != objects.end()) {
            throw ValueError(str("compile: the metric object '", metric.name(), "' is given twice; give each output ",
                                 "(and each place) its own metric object"));
          }
          objects.push_back(object.get());
        }
        const std::string prefix = several ? names[i] + "_" : "";
        std::string log_name = prefix + metric.name();
        // A weighted metric named as one already logged is "weighted_<name>", as in Keras.
        if (pass == 1 && std::find(log_names.begin(), log_names.end(), log_name) != log_names.end()) {
          log_name = prefix + "weighted_" + metric.name();
        }
        log_names.push_back(log_name);
        // An unknown metric name fails here, not in fit.
        compiled.push_back({i, metric.object() ? metric.object() : metrics::get(metric.name(), label_kind(*chosen[i])),
                            pass == 1});
      }
    }
  }
  for (std::size_t i = 0; i < names.size(); ++i) metrics[i].insert(metrics[i].end(), weighted[i].begin(), weighted[i].end());
  std::vector<std::string> unique(log_names);
  std::sort(unique.begin(), unique.end());
  if (auto twin = std::adjacent_find(unique.begin(), unique.end()); twin != unique.end()) {
    throw ValueError(str("compile: two metrics would log as '", *twin, "'; give them different names"));
  }
  optimizer_ = std::move(optimizer);
  losses_ = std::move(chosen);
  loss_weights_ = std::move(weights);
  output_metrics_ = std::move(metrics);
  metric_names_ = std::move(log_names);
  compiled_metrics_ = std::move(compiled);
  output_loss_trackers_.clear();
  if (several) {
    for (const std::string& output : names) output_loss_trackers_.push_back(std::make_shared<metrics::Mean>(output + "_loss"));
  }
}

optimizers::Optimizer& Model::optimizer() {
  check_compiled("optimizer()");
  return *optimizer_;
}

void Model::check_compiled(const char* what) const {
  if (!optimizer_ || losses_.empty()) {
    throw ValueError(str(what, ": model '", name(), "' must be compiled first; call ",
                         "compile(optimizer, loss, metrics)"));
  }
}

History Model::fit(const Tensor& x, const Tensor& y, const FitOptions& options) {
  return Trainer(*this).fit({x}, {y}, options);
}

std::map<std::string, double> Model::evaluate(const Tensor& x, const Tensor& y,
                                              const EvaluateOptions& options) {
  return Trainer(*this).evaluate({x}, {y}, options);
}

Tensor Model::predict(const Tensor& x, std::int64_t batch_size) {
  return Trainer(*this).predict({x}, batch_size).at(0);
}

History Model::fit(const std::vector<Tensor>& x, const std::vector<Tensor>& y, const FitOptions& options) {
  return Trainer(*this).fit(x, y, options);
}

std::map<std::string, double> Model::evaluate(const std::vector<Tensor>& x, const std::vector<Tensor>& y,
                                              const EvaluateOptions& options) {
  return Trainer(*this).evaluate(x, y, options);
}

std::vector<Tensor> Model::predict(const std::vector<Tensor>& x, std::int64_t batch_size) {
  return Trainer(*this).predict(x, batch_size);
}

double Model::train_on_batch(const Tensor& x, const Tensor& y) {
  return Trainer(*this).train_on_batch({x}, {y});
}

ActiveStep& Model::require_active_step(const char* what, bool training) const {
  if (active_step_ == nullptr || (training && !active_step_->training)) {
    throw ValueError(str(what, " runs inside ", training ? "fit's train_step" : "fit's or evaluate's steps",
                         " (model '", name(), "' is not ", training ? "training" : "in a step", " now); call fit() or ",
                         "evaluate(), which call train_step and test_step"));
  }
  return *active_step_;
}

Logs Model::train_step(const StepData& data) {
  ActiveStep& step = require_active_step("Model::train_step", true);
  step.builtin_result = step.run_builtin(data);
  return {};
}

Logs Model::test_step(const StepData& data) {
  ActiveStep& step = require_active_step("Model::test_step", false);
  step.builtin_result = step.run_builtin(data);
  return {};
}

Tensor Model::compute_loss(const StepData& data, const std::vector<Tensor>& y_pred) {
  check_compiled("compute_loss");
  if (data.y.size() != losses_.size()) {
    throw ValueError(str("compute_loss: model '", name(), "' has ", losses_.size(), " output(s) and takes one target ",
                         "array for each, got ", data.y.size()));
  }
  std::vector<Tensor> output_losses;
  Tensor loss = Trainer(*this).compute_loss(data, y_pred, &output_losses);
  // Each output's weighted loss joins its tracker, weighted by the rows, as Keras' compiled
  // loss updates its per-output metrics.
  const std::int64_t rows = data.y.empty() || data.y[0].rank() == 0 ? 0 : data.y[0].dim(0);
  if (rows > 0) {
    for (std::size_t i = 0; i < output_losses.size() && i < output_loss_trackers_.size(); ++i) {
      output_loss_trackers_[i]->update_state(output_losses[i], static_cast<double>(rows));
    }
  }
  return loss;
}

void Model::apply_gradients(const Tensor& loss) {
  ActiveStep& step = require_active_step("apply_gradients", true);
  if (!loss.defined() || loss.size() != 1) {
    throw ValueError(str("apply_gradients: the loss must be a one-element tensor, got ",
                         loss.defined() ? shape_to_string(loss.shape()) : std::string("an undefined tensor")));
  }
  step.apply_gradients(loss);
}

Logs Model::compute_metrics(const StepData& data, const std::vector<Tensor>& y_pred, const Tensor& loss) {
  check_compiled("compute_metrics");
  if (!data.output_sample_weights.empty() && data.output_sample_weights.size() != losses_.size()) {
    throw ValueError(str("compute_metrics: ", data.output_sample_weights.size(), " output_sample_weights for model '",
                         name(), "' of ", losses_.size(), " output(s); give one per output, or none"));
  }
  if (y_pred.size() != losses_.size() || data.y.size() != losses_.size()) {
    throw ValueError(str("compute_metrics: model '", name(), "' has ", losses_.size(), " output(s); got ",
                         y_pred.size(), " predictions and ", data.y.size(), " target arrays"));
  }
  const std::int64_t rows = data.y.empty() || data.y[0].rank() == 0 ? 0 : data.y[0].dim(0);
  if (rows > 0) {
    NoGradGuard no_grad;
    loss_tracker_->update_state(loss.detach(), static_cast<double>(rows));
    const distribution::ShardingContext* sharding = distribution::StepContext::sharding();
    for (const CompiledMetric& compiled : compiled_metrics_) {
      // The metrics see an output whole (it may lie sharded under ModelParallel).
      Tensor whole = sharding ? sharding->to_data_layout(y_pred[compiled.output]) : y_pred[compiled.output];
      compiled.update(data.y[compiled.output], whole.detach(), data.sample_weight_of(compiled.output));
    }
  }
  return metric_results();
}

std::vector<metrics::MetricPtr> Model::metrics() const {
  std::vector<metrics::MetricPtr> all = {loss_tracker_};
  all.insert(all.end(), output_loss_trackers_.begin(), output_loss_trackers_.end());
  for (const CompiledMetric& entry : compiled_metrics_) all.push_back(entry.metric);
  return all;
}

Logs Model::metric_results() {
  std::vector<metrics::MetricPtr> all = metrics();
  std::vector<double> totals;
  for (const metrics::MetricPtr& metric : all) {
    std::vector<double> state = metric->state();
    totals.insert(totals.end(), state.begin(), state.end());
  }
  BatchShard::current("metric_results").sum(totals);
  // In the order of the logs: "loss", then metric_names() (the outputs' losses, the metrics).
  Logs logs;
  std::size_t next = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::string& log_name = i == 0 ? all[0]->name() : metric_names_[i - 1];
    const auto begin = totals.begin() + static_cast<std::ptrdiff_t>(next);
    next += all[i]->state_size();
    logs[log_name] = all[i]->result_from(std::vector<double>(begin, totals.begin() + static_cast<std::ptrdiff_t>(next)));
  }
  return logs;
}

std::size_t Model::log_totals_size() const {
  std::size_t size = 2 + 2 * (metric_names_.size() - compiled_metrics_.size());
  for (const CompiledMetric& entry : compiled_metrics_) size += entry.metric->state_size();
  return size;
}

void Model::gather_optimizer_state() {
  if (gradient_reducer_ && optimizer_) gradient_reducer_->gather_optimizer_state(*optimizer_);
}

bool Model::optimizer_state_held_by_blocks() const {
  return gradient_reducer_ && gradient_reducer_->optimizer_state_held_by_blocks();
}

double Model::last_gradient_sync_seconds() const {
  return gradient_reducer_ ? gradient_reducer_->last_communication_seconds() : 0.0;
}

void Model::resume_training_from(TrainingPosition position) { resume_from_ = std::move(position); }

std::string Model::summary_text() { return keras::summary_text(*this, last_step_collectives_); }

void Model::summary() {
  std::string text = summary_text();
  if (distribution::process_id() == 0) std::fputs(text.c_str(), stdout);
}

void Model::save_weights(const std::string& path) {
  weight_files::check_file_name(path, "save_weights");
  check_built("save_weights");
  weight_files::save(*this, path);
}

void Model::save(const std::string& path) {
  check_built("save");
  saving::save_model(*this, path);
}

void Model::load_weights(const std::string& path) {
  weight_files::check_file_name(path, "load_weights");
  check_built("load_weights");
  weight_files::load(*this, path);
}

}  // namespace keras
