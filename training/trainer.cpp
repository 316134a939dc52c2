// Trainer: fit's epochs and batches with resume and callbacks, the optimisation step and its
// gradient collectives, evaluate's and predict's batch loops, and the logs read across processes.
#include "training/trainer.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>
#include <random>

#include "distribution/runtime/gradient_norms.h"
#include "distribution/runtime/gradient_reducer.h"
#include "distribution/sharding/redistribute.h"
#include "distribution/runtime/runtime.h"
#include "distribution/sharding/step_context.h"
#include "distribution/sharding/sharded_tensor.h"
#include "engine/errors.h"
#include "engine/global_batch.h"
#include "engine/ops.h"
#include "distribution/runtime/batch_shard.h"
#include "distribution/sharding/sharding_propagator.h"
#include "engine/op_dispatch.h"
#include "training/model_summary.h"
#include "training/progress_bar.h"

namespace keras {
namespace {

Tensor rows(const Tensor& data, const std::vector<std::int64_t>& order, std::int64_t begin,
            std::int64_t end) {
  if (begin == end) {  // a process's empty share of a small last batch
    Shape sizes = data.shape();
    sizes[0] = 0;
    return ops::slice(data, Shape(data.rank(), 0), sizes);
  }
  bool contiguous = true;
  for (std::int64_t i = begin; contiguous && i < end; ++i) contiguous = order[i] == order[begin] + (i - begin);
  if (contiguous) {
    Shape starts(data.rank(), 0);
    starts[0] = order[begin];
    Shape sizes = data.shape();
    sizes[0] = end - begin;
    return ops::slice(data, starts, sizes);
  }
  std::vector<std::int64_t> picked(order.begin() + begin, order.begin() + end);
  return ops::take(data, Tensor::from_vector(picked, {end - begin}).to(data.device()), 0);
}

// The rows order[begin, end) of `data`, on the default device, where the model's variables are
// (engine/device.h): what a training or evaluation step computes on.
Tensor batch_rows(const Tensor& data, const std::vector<std::int64_t>& order, std::int64_t begin,
                  std::int64_t end) {
  NoGradGuard no_grad;
  return rows(data, order, begin, end).to(default_device());
}

TensorList batch_rows(const TensorList& data, const std::vector<std::int64_t>& order, std::int64_t begin,
                      std::int64_t end) {
  TensorList result;
  result.reserve(data.size());
  for (const Tensor& array : data) result.push_back(batch_rows(array, order, begin, end));
  return result;
}

// Fisher-Yates on a 64-bit Mersenne Twister: the same permutation on every platform (unlike
// std::shuffle, whose algorithm the standard leaves open) — data-parallel ranks rely on that.
std::vector<std::int64_t> permutation(std::int64_t count, bool shuffle, std::mt19937_64& engine) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) order[i] = i;
  if (shuffle) {
    for (std::int64_t i = count - 1; i > 0; --i) {
      auto j = static_cast<std::int64_t>(engine() % static_cast<std::uint64_t>(i + 1));
      std::swap(order[i], order[j]);
    }
  }
  return order;
}

// What an epoch (or an evaluation) logs, as running totals: the total loss, each output's
// weighted loss (with several outputs, as Keras 3 logs "<output>_loss") and each output's
// metrics; in the order of Model::metric_names() after "loss". A metric given as an object is
// that object, reset here as Keras resets compiled metrics at each epoch.
class EpochLogs {
 public:
  // `outputs`: the model's output count; `metrics`: its compiled metrics (with their outputs),
  // reset here with the loss tracker, which a custom train_step or test_step updates.
  EpochLogs(std::size_t outputs, std::vector<CompiledMetric> metrics,
            std::shared_ptr<metrics::Mean> loss_tracker = nullptr,
            std::vector<std::shared_ptr<metrics::Mean>> output_loss_trackers = {})
      : metrics_(std::move(metrics)), loss_tracker_(std::move(loss_tracker)),
        output_loss_trackers_(std::move(output_loss_trackers)) {
    if (outputs > 1) output_losses_.resize(outputs);
    for (const CompiledMetric& entry : metrics_) entry.metric->reset_state();
    if (loss_tracker_) loss_tracker_->reset_state();
    for (const auto& tracker : output_loss_trackers_) tracker->reset_state();
  }
  // A step's results for `count` rows of this process (none: nothing to add); `data` gives the
  // rows' targets and the weights the weighted metrics read.
  void add(const Trainer::StepResult& step, const StepData& data, double count) {
    if (count <= 0) return;
    loss_.add(step.loss, count, count);
    for (std::size_t i = 0; i < output_losses_.size(); ++i) output_losses_[i].add(step.output_losses[i], count, count);
    for (const CompiledMetric& entry : metrics_) {
      entry.update(data.y[entry.output], step.predictions[entry.output], data.sample_weight_of(entry.output));
    }
  }
  std::size_t pending_terms() const { return loss_.pending_terms(); }
  // This process's (numerator, denominator) pairs: (sum, count) for the losses. Reading them
  // waits for the device and may raise its deferred errors.
  std::vector<double> local_totals() const {
    std::vector<double> totals = {loss_.sum(), loss_.count()};
    for (const auto& total : output_losses_) {
      totals.push_back(total.sum());
      totals.push_back(total.count());
    }
    for (const CompiledMetric& entry : metrics_) {
      std::vector<double> state = entry.metric->state();
      totals.insert(totals.end(), state.begin(), state.end());
    }
    return totals;
  }
  // Adds global totals saved by an interrupted run (local_totals()' layout).
  void add_totals(const std::vector<double>& totals) {
    loss_.add(totals.at(0), totals.at(1));
    std::size_t next = 2;
    for (auto& total : output_losses_) {
      total.add(totals.at(next), totals.at(next + 1));
      next += 2;
    }
    for (const CompiledMetric& entry : metrics_) {
      entry.metric->add_to_state(state_at(totals, next, *entry.metric));
      next += entry.metric->state_size();
    }
  }
  // Each metric's value from global totals.
  std::vector<double> results(const std::vector<double>& totals) const {
    std::vector<double> values;
    std::size_t next = 2;
    for (std::size_t i = 0; i < output_losses_.size(); ++i, next += 2) {
      values.push_back(totals[next + 1] > 0 ? totals[next] / totals[next + 1] : 0.0);
    }
    for (const CompiledMetric& entry : metrics_) {
      values.push_back(entry.metric->result_from(state_at(totals, next, *entry.metric)));
      next += entry.metric->state_size();
    }
    return values;
  }
  // At the end of an epoch or evaluation every process's metric objects hold the global state,
  // so result() read by the user after fit() is the logged value on every process.
  void hold_global_state(const std::vector<double>& totals) {
    if (loss_tracker_) loss_tracker_->set_state(totals[0], totals[1]);
    for (std::size_t i = 0; i < output_loss_trackers_.size() && i < output_losses_.size(); ++i) {
      output_loss_trackers_[i]->set_state(totals[2 + 2 * i], totals[3 + 2 * i]);
    }
    std::size_t next = 2 + 2 * output_losses_.size();
    for (const CompiledMetric& entry : metrics_) {
      entry.metric->set_state(state_at(totals, next, *entry.metric));
      next += entry.metric->state_size();
    }
  }
  // How many numbers local_totals() gives.
  std::size_t totals_size() const {
    std::size_t size = 2 + 2 * output_losses_.size();
    for (const CompiledMetric& entry : metrics_) size += entry.metric->state_size();
    return size;
  }

 private:
  metrics::RunningTotal loss_;
  std::vector<metrics::RunningTotal> output_losses_;
  std::vector<CompiledMetric> metrics_;
  std::shared_ptr<metrics::Mean> loss_tracker_;
  std::vector<std::shared_ptr<metrics::Mean>> output_loss_trackers_;

  static std::vector<double> state_at(const std::vector<double>& totals, std::size_t at, const metrics::Metric& metric) {
    if (at + metric.state_size() > totals.size()) {
      throw ValueError(str("the logs' totals end before metric '", metric.name(), "''s state (", totals.size(),
                           " numbers)"));
    }
    return std::vector<double>(totals.begin() + static_cast<std::ptrdiff_t>(at),
                               totals.begin() + static_cast<std::ptrdiff_t>(at + metric.state_size()));
  }
};

// Binds a step in progress to the model for the length of a step (Model::active_step_).
class ActiveStepBinding {
 public:
  ActiveStepBinding(ActiveStep*& slot, ActiveStep& step) : slot_(slot), previous_(slot) { slot_ = &step; }
  ~ActiveStepBinding() { slot_ = previous_; }
  ActiveStepBinding(const ActiveStepBinding&) = delete;
  ActiveStepBinding& operator=(const ActiveStepBinding&) = delete;

 private:
  ActiveStep*& slot_;
  ActiveStep* previous_;
};

// Keras' logs for the samples seen so far by all processes: each process's (sum, count) of the
// loss and of every metric are added across the data-parallel group, then divided.
// `totals_out`, when given, receives the global (sum, count) pairs themselves.
// Reading the totals is where a GPU's deferred errors surface (an index out of range, see
// engine/index_check.h), on the process whose data had it: the processes agree on whether one
// failed before they sum, so the others stop with it instead of waiting in a collective.
std::vector<double> global_totals(const BatchShard& context, const EpochLogs& logs) {
  std::vector<double> totals;
  std::exception_ptr failure;
  try {
    totals = logs.local_totals();
  } catch (...) {
    failure = std::current_exception();
    totals.assign(logs.totals_size(), 0.0);
  }
  // The failure flag and the sums in one all-reduce where the same processes decide both.
  if (context.sum_and_any_process(totals, failure != nullptr)) {
    if (failure) std::rethrow_exception(failure);
    throw Error(str("reading the loss and metrics failed on another process (its message says ",
                    "why); process ", distribution::process_id(), " stops with it"));
  }
  return totals;
}

// `names`: the log names after "loss" (Model::metric_names()).
Logs global_logs(const BatchShard& context, const EpochLogs& epoch, const std::vector<std::string>& names,
                 std::vector<double>* totals_out = nullptr) {
  std::vector<double> totals = global_totals(context, epoch);
  if (totals_out != nullptr) *totals_out = totals;
  Logs logs;
  logs["loss"] = totals[1] > 0 ? totals[0] / totals[1] : 0.0;
  std::vector<double> values = epoch.results(totals);
  for (std::size_t m = 0; m < names.size(); ++m) logs[names[m]] = values[m];
  return logs;
}

// What on_train_batch_end gets at a batch whose logs were not read (Callback::needs_batch_logs).
const Logs kNoLogs;

// Under ModelParallel the model's output may be sharded: the metrics and predict() see it whole,
// in the data layout.
Tensor to_data_layout(const Tensor& outputs) {
  const distribution::ShardingContext* context = distribution::StepContext::sharding();
  return context ? context->to_data_layout(outputs) : outputs;
}

// The loss on the model's outputs as they lie: its ops follow their sharding rules as a layer's
// do (docs/ARCHITECTURE.md, "Sharding at op dispatch"), so logits split by class stay split
// (the softmax rule: Megatron's vocabulary-parallel cross-entropy, with no code of its own).
Tensor loss_on_outputs(const losses::Loss& loss, const Tensor& y, const Tensor& outputs, const Tensor& sample_weight) {
  const distribution::ShardingContext* context = distribution::StepContext::sharding();
  if (context == nullptr || !outputs.annotation()) return loss(y, outputs, sample_weight);
  distribution::ShardingPropagator propagator(*context, "loss", nullptr);
  ShardedOpScope sharded_ops(&propagator);
  return loss(y, outputs, sample_weight);
}

// The global batch of a distributed step, for the losses whose reduction needs global sums
// (engine/global_batch.h): sums over the data-parallel group, which holds each row once.
class StepBatch final : public GlobalBatch {
 public:
  StepBatch(const BatchShard& context, double local_fraction) : context_(context), local_fraction_(local_fraction) {}
  void sum(std::vector<double>& values) const override { context_.sum(values); }
  double local_fraction() const override { return local_fraction_; }

 private:
  const BatchShard& context_;
  double local_fraction_;
};

// Keras' sample weights of a fit or evaluate call, one per sample: `sample_weight` (shape
// (samples,) or (samples, 1); per timestep, (samples, steps)) or, from `class_weight`, the
// weight of each sample's class (labels y[0]: class indices, or one-hot rows whose argmax is the
// class; classes the map leaves out weigh 1, as in Keras, which takes one of the two, not
// both). Undefined when neither is given.
Tensor sample_weights_for(const TensorList& y, const Tensor& sample_weight,
                          const std::map<std::int64_t, double>& class_weight, std::int64_t samples, const char* what) {
  NoGradGuard no_grad;
  Tensor weights;
  if (sample_weight.defined()) {
    if (sample_weight.rank() == 0 || sample_weight.dim(0) != samples) {
      throw ShapeError(str(what, ": sample_weight of shape ", shape_to_string(sample_weight.shape()), " for ", samples,
                           " samples; expected one weight per sample, shape (", samples, ",)"));
    }
    if (!is_floating(sample_weight.dtype()) && sample_weight.dtype() != int32 && sample_weight.dtype() != int64) {
      throw DTypeError(str(what, ": sample_weight must be numbers, got ", dtype_name(sample_weight.dtype())));
    }
    weights = ops::cast(sample_weight, float32).to(Device::cpu());
    for (double value : weights.to_vector<double>()) {
      if (!std::isfinite(value) || value < 0) {
        throw ValueError(str(what, ": sample_weight must be finite numbers >= 0, got ", value));
      }
    }
  }
  if (class_weight.empty()) return weights;
  if (weights.defined()) {
    throw ValueError(str(what, ": give sample_weight or class_weight, not both (Keras takes one): multiply the class ",
                         "weights into sample_weight yourself"));
  }
  if (y.size() != 1) {
    throw ValueError(str(what, ": class_weight is only supported for models with a single output (Keras' rule); this ",
                         "one has ", y.size(), ": give sample_weight instead"));
  }
  std::int64_t largest = -1;
  for (const auto& [label, weight] : class_weight) {
    if (label < 0) throw ValueError(str(what, ": class_weight has the class ", label, "; classes are indices >= 0"));
    if (!std::isfinite(weight) || weight < 0) {
      throw ValueError(str(what, ": class_weight[", label, "] must be a finite number >= 0, got ", weight));
    }
    largest = std::max(largest, label);
  }
  Tensor labels = y[0];
  if (labels.rank() > 1) labels = labels.shape().back() == 1 ? ops::squeeze(labels, -1) : ops::argmax(labels, -1);
  if (labels.rank() != 1) {
    throw ShapeError(str(what, ": class_weight needs one class per sample; the targets have shape ",
                         shape_to_string(y[0].shape())));
  }
  std::vector<double> classes = ops::cast(labels, float64).to(Device::cpu()).to_vector<double>();
  std::vector<float> per_sample(classes.size());
  for (std::size_t i = 0; i < classes.size(); ++i) {
    const auto label = static_cast<std::int64_t>(std::llround(classes[i]));
    if (label < 0 || label > largest) {
      throw ValueError(str(what, ": class_weight covers the classes 0 to ", largest, " but sample ", i, " is of class ",
                           label, "; give a weight for every class up to the largest"));
    }
    auto found = class_weight.find(label);
    per_sample[i] = static_cast<float>(found == class_weight.end() ? 1.0 : found->second);
  }
  return Tensor::from_vector(per_sample, {static_cast<std::int64_t>(per_sample.size())});
}

// The sample weights fit or evaluate was given: `sample_weight` (every output), or one array
// per output in output order or by output name (Keras' list and dict); at most one of the
// three. Each array is checked as sample_weights_for checks one.
SampleWeights sample_weights_of(const TensorList& y, const Tensor& sample_weight, const TensorList& per_output,
                                const std::map<std::string, Tensor>& by_output,
                                const std::vector<std::string>& output_names, std::int64_t samples, const char* what) {
  const int given = (sample_weight.defined() ? 1 : 0) + (per_output.empty() ? 0 : 1) + (by_output.empty() ? 0 : 1);
  if (given > 1) {
    throw ValueError(str(what, ": give sample_weight, output_sample_weights or sample_weight_by_output, one of the ",
                         "three (Keras' sample_weight is one array, a list or a dict)"));
  }
  SampleWeights weights;
  if (per_output.empty() && by_output.empty()) {
    weights.shared = sample_weights_for(y, sample_weight, {}, samples, what);
    return weights;
  }
  TensorList arrays = per_output;
  if (!by_output.empty()) {
    arrays.assign(output_names.size(), Tensor());
    for (const auto& [name, array] : by_output) {
      auto found = std::find(output_names.begin(), output_names.end(), name);
      if (found == output_names.end()) {
        std::string known;
        for (const std::string& output : output_names) known += (known.empty() ? "" : ", ") + output;
        throw ValueError(str(what, ": sample_weight_by_output names output '", name, "', but the model's outputs are ",
                             known));
      }
      arrays[static_cast<std::size_t>(found - output_names.begin())] = array;
    }
  }
  if (arrays.size() != output_names.size()) {
    throw ValueError(str(what, ": ", arrays.size(), " output_sample_weights for a model of ", output_names.size(),
                         " output(s); give one array per output (an undefined one weighs every sample 1)"));
  }
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    const std::string array_name = str(what, " (the sample weights of output '", output_names[i], "')");
    weights.per_output.push_back(sample_weights_for(y, arrays[i], {}, samples, array_name.c_str()));
  }
  return weights;
}

// The rows of weights that `pick` selects from each array (a batch, or one side of a split).
template <typename Pick>
SampleWeights rows_of(const SampleWeights& weights, Pick pick) {
  SampleWeights picked;
  if (weights.shared.defined()) picked.shared = pick(weights.shared);
  for (const Tensor& array : weights.per_output) picked.per_output.push_back(array.defined() ? pick(array) : Tensor());
  return picked;
}

// A batch's step data: its rows of x, y and the weights.
StepData step_data_of(const TensorList& x, const TensorList& y, const SampleWeights& weights,
                      const std::vector<std::int64_t>& order, std::int64_t begin, std::int64_t end) {
  auto rows = [&](const Tensor& array) { return batch_rows(array, order, begin, end); };
  SampleWeights batch = rows_of(weights, rows);
  return StepData{batch_rows(x, order, begin, end), batch_rows(y, order, begin, end), batch.shared, batch.per_output};
}

}  // namespace

void Trainer::check_data(const TensorList& x, const TensorList& y, const char* what) const {
  const std::size_t inputs = model_.input_count();
  if (x.size() != inputs) {
    throw ValueError(str(what, ": model '", model_.name(), "' takes ", inputs, " input array(s), got ", x.size()));
  }
  const std::size_t outputs = model_.losses_.size();
  if (y.size() != outputs) {
    throw ValueError(str(what, ": model '", model_.name(), "' has ", outputs, " output(s) and takes one target array ",
                         "for each, got ", y.size()));
  }
  auto name_of = [&](bool is_x, std::size_t i) {
    if (is_x) return inputs == 1 ? std::string("x") : str("x[", i, "]");
    return outputs == 1 ? std::string("y") : str("y[", i, "] ('", model_.output_names()[i], "')");
  };
  std::int64_t samples = -1;
  std::string first;
  for (int side = 0; side < 2; ++side) {
    const TensorList& arrays = side == 0 ? x : y;
    for (std::size_t i = 0; i < arrays.size(); ++i) {
      std::string name = name_of(side == 0, i);
      if (!arrays[i].defined()) throw ValueError(str(what, ": ", name, " must be given"));
      if (arrays[i].rank() == 0) {
        throw ShapeError(str(what, ": ", name, " needs a leading sample axis, got shape ",
                             shape_to_string(arrays[i].shape())));
      }
      if (samples < 0) {
        samples = arrays[i].dim(0);
        first = name;
      } else if (arrays[i].dim(0) != samples) {
        throw ShapeError(str(what, ": ", first, " has ", samples, " samples but ", name, " has ", arrays[i].dim(0),
                             "; they must have the same number of samples"));
      }
    }
  }
}

TensorList Trainer::forward(const TensorList& x, bool training) {
  if (x.size() == 1 && model_.output_count() == 1) return {model_(x[0], training)};
  return model_(x, training);
}

Tensor Trainer::compute_loss(const StepData& data, const TensorList& outputs, TensorList* output_losses) {
  const TensorList& y = data.y;
  if (!data.output_sample_weights.empty() && data.output_sample_weights.size() != model_.losses_.size()) {
    throw ValueError(str("compute_loss: ", data.output_sample_weights.size(), " output_sample_weights for model '",
                         model_.name(), "' of ", model_.losses_.size(), " output(s); give one per output, or none"));
  }
  if (outputs.size() != model_.losses_.size()) {
    throw ValueError(str("model '", model_.name(), "' gave ", outputs.size(), " outputs, but was compiled with ",
                         model_.losses_.size(), " losses"));
  }
  Tensor total;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    Tensor value = loss_on_outputs(*model_.losses_[i], y[i], outputs[i], data.sample_weight_of(i));
    if (value.rank() != 0) {
      throw ValueError(str("the loss '", model_.losses_[i]->name(), "' of output '", model_.output_names()[i],
                           "' gave shape ", shape_to_string(value.shape()), "; training needs a scalar (Keras' ",
                           "fit on JAX or torch refuses reduction=\"none\" too): give it another reduction"));
    }
    // A weight of 1 multiplies nothing: one output's loss is the loss itself, bit for bit.
    if (model_.loss_weights_[i] != 1.0) value = value * model_.loss_weights_[i];
    if (output_losses != nullptr && outputs.size() > 1) output_losses->push_back(value.detach());
    total = total.defined() ? total + value : value;
  }
  return total;
}

TensorList Trainer::metric_inputs(const TensorList& outputs) const {
  TensorList predictions(outputs.size());
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    // The metrics see an output whole; one without metrics is not gathered for nothing.
    if (!model_.output_metrics_[i].empty()) predictions[i] = to_data_layout(outputs[i]).detach();
  }
  return predictions;
}

Trainer::StepResult Trainer::train_step(const StepData& data, double loss_scale, const BatchShard& context,
                                        const BatchShard::Rows* rows, std::optional<bool> read_logs_here) {
  distribution::CollectiveLog::Scope collectives;
  // The step's sharding, resolved once for the forward pass, the loss and the backward pass.
  distribution::StepContext step_context;
  for (Tensor& variable : model_.trainable_weights()) variable.zero_grad();
  StepResult result;
  Tensor loss;
  {
    std::optional<BatchShard::StepScope> scope;
    if (rows != nullptr) scope.emplace(*rows);
    // Runs even on zero rows (a process may get none of a dataset's last, small batch): every
    // process then makes the same calls, so per-call state (Dropout's key) stays in step.
    TensorList outputs = forward(data.x, /*training=*/true);
    // The loss takes the outputs as they lie (logits split by class are not gathered for it);
    // the metrics, when there are any, see them whole.
    TensorList output_losses;
    loss = compute_loss(data, outputs, &output_losses);
    const bool rows_here = data.x[0].dim(0) > 0;
    result = {rows_here ? loss.detach() : Tensor(), rows_here ? output_losses : TensorList(), metric_inputs(outputs),
              std::nullopt};
  }
  apply_gradients(loss, loss_scale, context, read_logs_here, &result.read_logs_on_any_process);
  model_.last_step_collectives_ = collectives.totals();
  return result;
}

void Trainer::apply_gradients(const Tensor& loss, double loss_scale, const BatchShard& context,
                              std::optional<bool> read_logs_here,
                              std::optional<bool>* read_logs_on_any_process) {
  const bool distributed = context.distributed();
  // Taken after the forward pass: the first call builds the model, and the variables it
  // creates must be trained by this step too (they were not, before: the first step's
  // gradients were dropped).
  std::vector<Tensor> variables = model_.trainable_weights();
  if (distributed) {
    std::vector<Tensor> reduced = context.variables_to_reduce(variables);
    // Clipping reads whole gradients, and accumulation and moving averages keep whole
    // variables' state: such an optimizer updates whole variables, not blocks (set perhaps
    // after a reducer that updates by blocks was made).
    const bool clips = model_.optimizer_->needs_whole_variables();
    if (!model_.gradient_reducer_ || !model_.gradient_reducer_->serves(context.group(), reduced) ||
        (clips && model_.gradient_reducer_->block_updated_count() > 0)) {
      // The state the old reducer kept by blocks is made whole before another takes over
      // (every process replaces it at the same step).
      model_.gather_optimizer_state();
      const bool layers_communicate =
          context.layers_communicate(variables) || any_layer_synchronizes_batch(model_);
      model_.gradient_reducer_ = std::make_shared<distribution::GradientReducer>(
          context.group(), reduced, distribution::BucketOptions::from_environment(),
          /*overlap=*/!layers_communicate, /*shard_updates=*/!layers_communicate && !clips);
    }
    // The step's flag rides the gradients' last bucket: deciding together costs no collective.
    const bool flag_rides = read_logs_here.has_value() && model_.gradient_reducer_->flag_rides_gradients() &&
                            context.agreement_is_the_group();
    if (flag_rides) model_.gradient_reducer_->set_step_flag(*read_logs_here);
    // LossScaleOptimizer's scale on top of this process's share of the batch.
    Tensor scaled = model_.optimizer_->scale_loss(loss * loss_scale);
    // Buckets start their all-reduce while the rest of the backward pass runs.
    keras::backward({scaled}, {Tensor::ones({}, scaled.dtype(), scaled.device())},
                    [this](const Tensor& leaf) { model_.gradient_reducer_->gradient_ready(leaf); });
    model_.gradient_reducer_->finish();
    if (flag_rides && read_logs_on_any_process != nullptr) {
      *read_logs_on_any_process = model_.gradient_reducer_->step_flag_on_any_process();
    }
  } else {
    // Training goes on without distribution: the state made whole first.
    if (model_.gradient_reducer_) {
      model_.gather_optimizer_state();
      model_.gradient_reducer_.reset();
    }
    model_.optimizer_->scale_loss(loss).backward();
  }
  std::vector<Tensor> gradients;
  gradients.reserve(variables.size());
  for (const Tensor& variable : variables) gradients.push_back(variable.grad());
  // Clipping by norm reads the whole model's gradient norms, which span the processes that
  // hold its blocks (distribution/runtime/gradient_norms.h).
  model_.optimizer_->set_squared_norm_sum(distribution::StepContext::sharding() != nullptr
                                              ? distribution::sum_squared_norms_over_processes
                                              : optimizers::Optimizer::SquaredNormSum());
  model_.optimizer_->apply(variables, gradients);
  if (distributed) model_.gradient_reducer_->update_owned_blocks(*model_.optimizer_);
  for (Tensor& variable : variables) variable.zero_grad();
}

std::optional<Trainer::StepResult> Trainer::call_train_step(const StepData& batch, double loss_scale,
                                                            const BatchShard& context,
                                                            const BatchShard::Rows* rows,
                                                            std::optional<bool> read_logs_here,
                                                            std::optional<Logs>& custom_logs) {
  ActiveStep step;
  step.training = true;
  step.run_builtin = [&](const StepData& data) {
    return train_step(data, loss_scale, context, rows, read_logs_here);
  };
  step.apply_gradients = [&](const Tensor& loss) {
    apply_gradients(loss, loss_scale, context, std::nullopt, nullptr);
  };
  ActiveStepBinding binding(model_.active_step_, step);
  // An override's forward pass runs in the step's sharding and rows, as the default's does.
  distribution::CollectiveLog::Scope collectives;
  distribution::StepContext step_context;
  std::optional<BatchShard::StepScope> scope;
  if (rows != nullptr) scope.emplace(*rows);
  // A loss whose reduction is not the mean over rows reads the global batch's sums.
  StepBatch global_batch(context, loss_scale);
  std::optional<GlobalBatch::Scope> batch_scope;
  if (context.distributed()) batch_scope.emplace(&global_batch);
  for (Tensor& variable : model_.trainable_weights()) variable.zero_grad();
  Logs logs = model_.train_step(batch);
  if (step.builtin_result) return std::move(step.builtin_result);
  custom_logs = std::move(logs);
  model_.last_step_collectives_ = collectives.totals();
  return std::nullopt;
}

double Trainer::train_on_batch(const TensorList& x, const TensorList& y) {
  model_.check_compiled("train_on_batch");
  check_data(x, y, "train_on_batch");
  BatchShard context = BatchShard::current("train_on_batch");
  std::int64_t rows_total = x[0].dim(0);
  context.check_same({rows_total}, "train_on_batch");
  auto [begin, end] = context.local_rows(0, rows_total);
  std::vector<std::int64_t> order(static_cast<std::size_t>(rows_total));
  for (std::int64_t i = 0; i < rows_total; ++i) order[i] = i;
  TensorList x_local = batch_rows(x, order, begin, end), y_local = batch_rows(y, order, begin, end);
  double scale = rows_total > 0 ? double(end - begin) / double(rows_total) : 1.0;
  BatchShard::Rows rows{rows_total, begin, end - begin};
  std::optional<Logs> custom_logs;
  std::optional<StepResult> stepped = call_train_step(StepData{x_local, y_local}, scale, context,
                                                      context.distributed() ? &rows : nullptr, std::nullopt,
                                                      custom_logs);
  if (!stepped) {
    // The model's own train_step: its logs' loss, as Keras' train_on_batch returns it.
    auto loss = custom_logs->find("loss");
    if (loss == custom_logs->end()) {
      throw ValueError(str("train_on_batch returns the loss, and model '", model_.name(), "''s train_step returned ",
                           "no \"loss\" in its logs (return compute_metrics(...) or a \"loss\" entry)"));
    }
    return loss->second;
  }
  StepResult& result = *stepped;
  // Keras returns the loss as a number: this read waits for the device, once per call, and
  // may raise its deferred errors (shared as in global_logs).
  result.output_losses.clear();  // the total only
  EpochLogs total_only(1, {});
  total_only.add(result, StepData{x_local, y_local}, double(end - begin));
  std::vector<double> totals = global_totals(context, total_only);
  return totals[1] > 0 ? totals[0] / totals[1] : 0.0;
}

History Trainer::fit(const TensorList& given_x, const TensorList& given_y, const FitOptions& options) {
  model_.check_compiled("fit");
  check_data(given_x, given_y, "fit");
  if (options.batch_size <= 0) {
    throw ValueError(str("fit: batch_size must be a positive integer, got ", options.batch_size));
  }
  if (options.epochs < 0) throw ValueError(str("fit: epochs must be >= 0, got ", options.epochs));
  if (options.initial_epoch < 0) throw ValueError(str("fit: initial_epoch must be >= 0, got ", options.initial_epoch));
  if (options.steps_per_epoch < 0) {
    throw ValueError(str("fit: steps_per_epoch must be >= 0 (0: one pass over the data), got ", options.steps_per_epoch));
  }
  options.validation_freq.check();
  if (!(options.validation_split >= 0.0 && options.validation_split < 1.0)) {
    throw ValueError(str("fit: validation_split must be in [0, 1), got ", options.validation_split));
  }
  const std::int64_t given_samples = given_x[0].dim(0);
  // One weight per sample from sample_weight, or per output (undefined without); class_weight's
  // come after the split, for the training samples only, as in Keras.
  const std::vector<std::string> output_names = model_.output_names();
  SampleWeights given_weights =
      sample_weights_of(given_y, options.sample_weight, options.output_sample_weights, options.sample_weight_by_output,
                        output_names, given_samples, "fit");
  if (given_weights.defined() && !options.class_weight.empty()) {
    throw ValueError(str("fit: give sample weights (", given_weights.per_output.empty() ? "sample_weight" : "by output",
                         ") or class_weight, not both (Keras takes one): multiply the class weights into the sample ",
                         "weights yourself"));
  }
  // Validation arrays: ValidationData's x and y, or its lists for several inputs or outputs;
  // else, with validation_split, the last samples of the arrays (before shuffling), as Keras.
  const ValidationData& validation_data = options.validation_data;
  TensorList validation_x = validation_data.inputs, validation_y = validation_data.targets;
  SampleWeights validation_weights;
  if (validation_data.x.defined() || validation_data.y.defined()) {
    if (!validation_x.empty() || !validation_y.empty()) {
      throw ValueError("fit: validation_data gives both x/y and inputs/targets; give one pair");
    }
    validation_x = {validation_data.x};
    validation_y = {validation_data.y};
  }
  TensorList x = given_x, y = given_y;
  SampleWeights weights = given_weights;
  if (validation_data.defined()) {
    check_data(validation_x, validation_y, "fit validation_data");
    validation_weights = sample_weights_of(validation_y, validation_data.sample_weight,
                                           validation_data.output_sample_weights, {}, output_names,
                                           validation_x[0].dim(0), "fit validation_data");
  } else if (options.validation_split > 0) {
    const auto split_at = static_cast<std::int64_t>(std::floor(double(given_samples) * (1.0 - options.validation_split)));
    if (split_at == 0 || split_at == given_samples) {
      throw ValueError(str("fit: the training data has ", given_samples, " samples, which is not enough to split it into ",
                           "a validation and a training set as validation_split=", options.validation_split,
                           " asks; give more data or another validation_split"));
    }
    auto split = [&](const Tensor& array, std::int64_t begin, std::int64_t end) {
      Shape starts(array.rank(), 0);
      starts[0] = begin;
      Shape sizes = array.shape();
      sizes[0] = end - begin;
      return ops::slice(array, starts, sizes);
    };
    x.clear();
    y.clear();
    for (const Tensor& array : given_x) {
      x.push_back(split(array, 0, split_at));
      validation_x.push_back(split(array, split_at, given_samples));
    }
    for (const Tensor& array : given_y) {
      y.push_back(split(array, 0, split_at));
      validation_y.push_back(split(array, split_at, given_samples));
    }
    weights = rows_of(given_weights, [&](const Tensor& array) { return split(array, 0, split_at); });
    validation_weights = rows_of(given_weights, [&](const Tensor& array) { return split(array, split_at, given_samples); });
  }
  if (!options.class_weight.empty()) {
    weights.shared = sample_weights_for(y, Tensor(), options.class_weight, y[0].dim(0), "fit");
  }
  const bool validates = !validation_x.empty();
  BatchShard context = BatchShard::current("fit");
  std::int64_t samples = x[0].dim(0);
  context.check_same({samples, options.batch_size, options.epochs, options.shuffle ? 1 : 0,
                      validates ? validation_x[0].dim(0) : -1, options.initial_epoch, options.steps_per_epoch,
                      options.validation_freq.fingerprint(), weights.defined() ? 1 : 0,
                      static_cast<std::int64_t>(weights.per_output.size())},
                     "fit");
  if (options.batch_size % context.shards() != 0) {
    throw ValueError(str("fit: batch_size is the global batch and must be divisible by the ",
                         context.shards(), " data-parallel processes; got batch_size=",
                         options.batch_size));
  }
  std::int64_t batch_size = std::min(options.batch_size, std::max<std::int64_t>(samples, 1));
  std::int64_t steps = (samples + batch_size - 1) / batch_size;  // batches in a pass over the data
  const std::int64_t epoch_steps = options.steps_per_epoch > 0 ? options.steps_per_epoch : steps;
  std::vector<std::int64_t> order;  // the pass's permutation of the samples
  std::int64_t pass_batch = 0;      // the pass's next batch, with steps_per_epoch
  // Resolved on every process (a bad KERAS_PROGRESS fails them all alike), used on the first.
  const int resolved_verbose = options.verbose.resolve();
  int verbose = context.prints() ? resolved_verbose : 0;
  const bool bar_each_batch = ProgressBar::redraws_in_place(verbose);  // on this process
  std::mt19937_64 shuffle_engine(next_random_seed());
  History history;
  model_.stop_training = false;
  model_.resume_from_.reset();
  auto position_at = [&](int epoch, std::int64_t step) {
    TrainingPosition position;
    position.epoch = epoch;
    position.step = step;
    position.shuffle_state = shuffle_state_of(shuffle_engine);
    position.epoch_learning_rate = model_.optimizer_->learning_rate();
    position.samples = samples;
    position.batch_size = batch_size;
    position.steps = epoch_steps;
    position.epochs = options.epochs;
    return position;
  };
  model_.position_ = position_at(options.initial_epoch, 0);
  for (const CallbackPtr& callback : options.callbacks) callback->on_train_begin(model_);
  int first_epoch = options.initial_epoch;
  std::int64_t first_step = 0;
  std::vector<double> resumed_totals;
  if (model_.resume_from_) {
    TrainingPosition resumed = std::move(*model_.resume_from_);
    model_.resume_from_.reset();
    if (options.steps_per_epoch > 0) {
      // Its epochs run on through one pass of the data; where a pass stood is not saved.
      throw ValueError(str("fit: resuming a run (BackupAndRestore) with steps_per_epoch=", options.steps_per_epoch,
                           " is not supported: where each epoch stood in its pass over the data is not saved; ",
                           "fit with steps_per_epoch=0 (one pass per epoch) to resume"));
    }
    check_resumable(resumed, model_.position_, model_.log_totals_size());
    restore_shuffle_state(shuffle_engine, resumed.shuffle_state);
    first_epoch = resumed.epoch;
    first_step = resumed.step;
    resumed_totals = std::move(resumed.totals);
    // In the middle of an epoch, its on_epoch_begin callbacks run again below: from the rate
    // they started from the first time.
    if (first_step > 0 && !model_.optimizer_->learning_rate_schedule()) {
      model_.optimizer_->set_learning_rate(resumed.epoch_learning_rate);
    }
  }
  for (int epoch = first_epoch; epoch < options.epochs && !model_.stop_training; ++epoch) {
    const std::int64_t start_step = epoch == first_epoch ? first_step : 0;
    model_.position_ = position_at(epoch, start_step);
    for (const CallbackPtr& callback : options.callbacks) callback->on_epoch_begin(model_, epoch);
    if (verbose > 0) std::printf("Epoch %d/%d\n", epoch + 1, options.epochs);
    // Each epoch is a pass over the data, shuffled anew; with steps_per_epoch an epoch takes
    // that many batches and the next goes on through the same pass, as Keras' epoch iterator.
    if (options.steps_per_epoch == 0 || pass_batch == 0) {
      order = permutation(samples, options.shuffle, shuffle_engine);
      pass_batch = 0;
    }
    EpochLogs epoch_logs(model_.losses_.size(), model_.compiled_metrics_, model_.loss_tracker_,
                         model_.output_loss_trackers_);
    // A run resumed mid-epoch starts from the saved global totals of the batches done; the
    // first process of the data-parallel group holds them (logs sum over that group).
    if (start_step > 0 && context.shard_id() == 0) epoch_logs.add_totals(resumed_totals);
    ProgressBar bar(epoch_steps, verbose);
    Logs logs;
    // The logs are read (a wait for the device and, under data parallelism, a sum over the
    // processes) only after the batches that need them: where a callback asks, every batch
    // while a bar is drawn, and after the epoch's last batch. `logs_through` is how many of the
    // epoch's batches the logs cover.
    std::int64_t logs_through = 0;
    if (start_step > 0) {
      logs = global_logs(context, epoch_logs, model_.metric_names_);
      logs_through = start_step;
    }
    std::int64_t steps_done = start_step;
    for (std::int64_t step = start_step; step < epoch_steps; ++step) {
      const std::int64_t batch = options.steps_per_epoch > 0 ? pass_batch : step;
      if (batch >= steps) {
        if (context.prints()) {
          std::fprintf(stderr,
                       "warning: fit: the data ran out after %lld of this epoch's steps_per_epoch=%lld batches (a pass "
                       "is %lld batches); the epoch ends here and the next starts a new pass\n",
                       static_cast<long long>(step), static_cast<long long>(epoch_steps),
                       static_cast<long long>(steps));
        }
        break;
      }
      std::int64_t global_begin = batch * batch_size;
      std::int64_t global_end = std::min(samples, global_begin + batch_size);
      auto [begin, end] = context.local_rows(global_begin, global_end);
      StepData step_data = step_data_of(x, y, weights, order, begin, end);
      double scale = double(end - begin) / double(global_end - global_begin);
      BatchShard::Rows rows{global_end - global_begin, begin - global_begin, end - begin};
      // Whether this process wants the logs after this batch is known before it: the flag
      // then rides the step's gradients (GradientReducer::set_step_flag).
      bool read_logs_here = bar_each_batch;
      for (const CallbackPtr& callback : options.callbacks) {
        read_logs_here = read_logs_here || callback->needs_batch_logs(step);
      }
      // Bounds what the running totals hold on the device between reads.
      read_logs_here = read_logs_here || epoch_logs.pending_terms() + (end > begin ? 1 : 0) >=
                                             metrics::RunningTotal::kReadAfterTerms;
      std::optional<Logs> custom_logs;
      std::optional<StepResult> result = call_train_step(step_data, scale, context,
                                                         context.distributed() ? &rows : nullptr, read_logs_here,
                                                         custom_logs);
      if (result) epoch_logs.add(*result, step_data, static_cast<double>(end - begin));
      steps_done = step + 1;
      if (options.steps_per_epoch > 0) ++pass_batch;
      // A train_step of the user's own returns its logs, read already (metric_results()).
      const bool read_logs = !result                              ? true
                             : result->read_logs_on_any_process ? *result->read_logs_on_any_process
                                                                 : context.any_process(read_logs_here);
      if (custom_logs) {
        logs = std::move(*custom_logs);
        logs_through = steps_done;
        // Its totals are the user's: a position saved now could not be resumed mid-epoch.
        model_.position_.totals.clear();
      } else if (read_logs) {
        // Logs are means over the global batch: sum (value, count) pairs across processes.
        logs = global_logs(context, epoch_logs, model_.metric_names_, &model_.position_.totals);
        logs_through = steps_done;
      } else {
        // Not this batch's: a position saved now could not be resumed (check_resumable says so).
        model_.position_.totals.clear();
      }
      model_.position_.step = step + 1;
      const Logs& batch_logs = read_logs ? logs : kNoLogs;
      for (const CallbackPtr& callback : options.callbacks) {
        callback->on_train_batch_end(model_, step, batch_logs);
      }
      if (!model_.plan_checked_) {
        model_.plan_checked_ = true;
        if (context.prints()) {
          for (const std::string& warning : plan_warnings(model_)) {
            std::fprintf(stderr, "warning: %s\n", warning.c_str());
          }
        }
      }
      // As Keras: a callback that sets stop_training ends the epoch after this batch.
      if (model_.stop_training) break;
      if (read_logs && verbose == 1 && step + 1 < epoch_steps) bar.update(step + 1, logs, false);
    }
    if (logs_through != steps_done) {
      logs = global_logs(context, epoch_logs, model_.metric_names_, &model_.position_.totals);
      logs_through = steps_done;
    }
    if (!model_.position_.totals.empty()) epoch_logs.hold_global_state(model_.position_.totals);
    if (options.steps_per_epoch > 0 && pass_batch >= steps) pass_batch = 0;  // the next epoch starts a pass
    if (validates && options.validation_freq.validates_after(epoch)) {
      std::int64_t validation_batch =
          options.validation_batch_size > 0 ? options.validation_batch_size : batch_size;
      auto validation = run_evaluation(validation_x, validation_y, validation_weights, validation_batch, 0);
      for (const auto& [name, value] : validation) logs["val_" + name] = value;
    }
    model_.position_ = position_at(epoch + 1, 0);
    for (const CallbackPtr& callback : options.callbacks) {
      callback->on_epoch_end(model_, epoch, logs);
    }
    // After the callbacks, as Keras' History and progress bar come last: they see what the
    // callbacks added to the logs ("learning_rate").
    if (verbose > 0) bar.update(epoch_steps, logs, true);
    history.epoch.push_back(epoch);
    for (const auto& [name, value] : logs) history.history[name].push_back(value);
  }
  // Each process's optimizer state is current only in its blocks during training
  // (distribution/runtime/gradient_reducer.h); after fit() it is whole, as a user reading it expects.
  model_.gather_optimizer_state();
  // With use_ema the variables take their moving averages, as at the end of Keras' fit.
  model_.optimizer_->finalize_variable_values(model_.trainable_weights());
  for (const CallbackPtr& callback : options.callbacks) callback->on_train_end(model_);
  return history;
}

std::map<std::string, double> Trainer::run_evaluation(const TensorList& x, const TensorList& y,
                                                      const SampleWeights& weights, std::int64_t batch_size,
                                                      int verbose) {
  if (batch_size <= 0) {
    throw ValueError(str("evaluate: batch_size must be a positive integer, got ", batch_size));
  }
  NoGradGuard no_grad;
  BatchShard context = BatchShard::current("evaluate");
  std::int64_t samples = x[0].dim(0);
  context.check_same({samples, batch_size, weights.defined() ? 1 : 0, static_cast<std::int64_t>(weights.per_output.size())},
                     "evaluate");
  if (!context.prints()) verbose = 0;
  std::int64_t steps = (samples + batch_size - 1) / batch_size;
  EpochLogs totals(model_.losses_.size(), model_.compiled_metrics_, model_.loss_tracker_,
                   model_.output_loss_trackers_);
  std::mt19937_64 unused_engine(0);
  std::vector<std::int64_t> order = permutation(samples, /*shuffle=*/false, unused_engine);
  const bool bar_each_batch = ProgressBar::redraws_in_place(verbose);  // on this process
  ProgressBar bar(steps, verbose);
  std::map<std::string, double> results;
  std::vector<double> global;  // the totals of the last read
  // As in fit(): the results are read after each batch only while a bar is drawn.
  for (std::int64_t step = 0; step < steps; ++step) {
    std::int64_t global_begin = step * batch_size;
    auto [begin, end] = context.local_rows(global_begin, std::min(samples, global_begin + batch_size));
    auto count = static_cast<double>(end - begin);
    // Runs on every process, even one without rows in a small last batch, as fit's step does:
    // a test_step of the user's own may communicate (metric_results), and all must call it.
    distribution::StepContext step_context;
    const std::int64_t global_rows = std::min(samples, global_begin + batch_size) - global_begin;
    StepBatch global_batch(context, global_rows > 0 ? count / static_cast<double>(global_rows) : 0.0);
    std::optional<GlobalBatch::Scope> batch_scope;
    if (context.distributed()) batch_scope.emplace(&global_batch);
    StepData batch = step_data_of(x, y, weights, order, begin, end);
    ActiveStep active;
    active.training = false;
    active.run_builtin = [&](const StepData& data) {
      TensorList outputs = forward(data.x, /*training=*/false);
      StepResult result;
      result.loss = compute_loss(data, outputs, &result.output_losses);
      result.predictions = metric_inputs(outputs);
      return result;
    };
    Logs returned;
    {
      ActiveStepBinding binding(model_.active_step_, active);
      returned = model_.test_step(batch);
    }
    if (!active.builtin_result) {
      // The user's test_step returned its logs, read already (metric_results()).
      results = std::move(returned);
      if (verbose == 1) bar.update(step + 1, results, step + 1 == steps);
      continue;
    }
    totals.add(*active.builtin_result, batch, count);
    bool read = context.any_process(
        bar_each_batch || totals.pending_terms() >= metrics::RunningTotal::kReadAfterTerms);
    if (read || step + 1 == steps) results = global_logs(context, totals, model_.metric_names_, &global);
    if (verbose == 1 && (read || step + 1 == steps)) bar.update(step + 1, results, step + 1 == steps);
  }
  if (verbose == 2) bar.update(steps, results, true);
  if (!global.empty()) totals.hold_global_state(global);
  return results;
}

std::map<std::string, double> Trainer::evaluate(const TensorList& x, const TensorList& y,
                                                const EvaluateOptions& options) {
  model_.check_compiled("evaluate");
  check_data(x, y, "evaluate");
  SampleWeights weights = sample_weights_of(y, options.sample_weight, options.output_sample_weights,
                                            options.sample_weight_by_output, model_.output_names(), x[0].dim(0),
                                            "evaluate");
  return run_evaluation(x, y, weights, options.batch_size, options.verbose.resolve());
}

TensorList Trainer::predict(const TensorList& x, std::int64_t batch_size) {
  const std::size_t inputs = model_.input_count();
  if (x.size() != inputs) {
    throw ValueError(str("predict: model '", model_.name(), "' takes ", inputs, " input array(s), got ", x.size()));
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!x[i].defined() || x[i].rank() == 0) throw ValueError("predict: x needs a leading sample axis");
    if (x[i].dim(0) != x[0].dim(0)) {
      throw ShapeError(str("predict: x[0] has ", x[0].dim(0), " samples but x[", i, "] has ", x[i].dim(0)));
    }
  }
  if (batch_size <= 0) {
    throw ValueError(str("predict: batch_size must be a positive integer, got ", batch_size));
  }
  NoGradGuard no_grad;
  std::vector<TensorList> batches;  // per output, its batches
  std::int64_t samples = x[0].dim(0);
  for (std::int64_t begin = 0; begin < samples; begin += batch_size) {
    std::int64_t end = std::min(samples, begin + batch_size);
    TensorList x_batch;
    for (const Tensor& array : x) {
      Shape starts(array.rank(), 0);
      starts[0] = begin;
      Shape sizes = array.shape();
      sizes[0] = end - begin;
      x_batch.push_back(ops::slice(array, starts, sizes).to(default_device()));
    }
    distribution::StepContext step_context;
    TensorList outputs = forward(x_batch, false);
    batches.resize(outputs.size());
    for (std::size_t o = 0; o < outputs.size(); ++o) batches[o].push_back(to_data_layout(outputs[o]));
  }
  if (batches.empty()) throw ValueError("predict: x has no samples");
  // On the host, as Keras' predict returns NumPy arrays.
  TensorList results;
  for (const TensorList& output : batches) {
    results.push_back((output.size() == 1 ? output[0] : ops::concatenate(output, 0)).to(Device::cpu()));
  }
  return results;
}

}  // namespace keras
