// Model: a Layer that can be trained. compile / fit / evaluate / predict follow Keras: fit
// returns a History, metrics are means over all samples seen, callbacks see Keras' logs
// ("loss", "accuracy", "val_loss", …), and save_weights / load_weights use safetensors keyed by
// variable path. Sequential stacks layers; subclass Model (override call) for custom models.
#pragma once
#include <concepts>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "distribution/runtime/collective_log.h"
#include "engine/losses.h"
#include "engine/optimizers.h"
#include "training/callbacks.h"
#include "training/functional.h"
#include "layers/layer.h"
#include "distribution/runtime/batch_shard.h"
#include "training/metrics.h"
#include "training/progress_output.h"
#include "training/training_position.h"

namespace keras::distribution {
class GradientReducer;
}

namespace keras {

// A loss given by Keras name or as an object.
class LossSpec {
 public:
  LossSpec(const char* name) : loss_(losses::get(name)) {}
  LossSpec(const std::string& name) : loss_(losses::get(name)) {}
  LossSpec(losses::LossPtr loss) : loss_(std::move(loss)) {}
  template <typename L>
    requires std::derived_from<L, losses::Loss>
  LossSpec(L loss) : loss_(std::make_shared<L>(std::move(loss))) {}
  // A function of (y_true, y_pred) giving per-sample losses, as Keras' loss=my_function; it logs
  // as "custom_loss" (name it with losses::FunctionLoss(function, name)).
  template <typename F>
    requires(std::is_invocable_r_v<Tensor, F, const Tensor&, const Tensor&> && !std::derived_from<F, losses::Loss>)
  LossSpec(F function) : loss_(std::make_shared<losses::FunctionLoss>(std::move(function), "custom_loss")) {}
  const losses::LossPtr& get() const { return loss_; }

 private:
  losses::LossPtr loss_;
};

// A compiled metric: its output, its object, and whether it weighs the samples (Keras'
// weighted_metrics).
struct CompiledMetric {
  std::size_t output = 0;
  metrics::MetricPtr metric;
  bool weighted = false;
  // Updates the metric with a batch's targets and predictions (and weights, when it weighs them).
  void update(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) const {
    if (weighted) {
      metric->update_state(y_true, y_pred, sample_weight);
    } else {
      metric->update_state(y_true, y_pred);
    }
  }
};

// compile()'s per-output settings for a model of several outputs, in the model's output order
// (the vectors) or by output name (the maps; Keras' dicts), as Keras' compile takes them:
//   model.compile("adam", {.loss = {"mse", "sparse_categorical_crossentropy"},
//                          .loss_weights = {1.0, 0.2}, .metrics = {{}, {"accuracy"}}});
// One loss (a vector of one) applies to every output. The total loss is the weighted sum of the
// outputs' losses; fit logs it as "loss", each output's as "<output>_loss" and each metric as
// "<output>_<metric>" (with one output: "loss" and the metric's name).
struct CompileOptions {
  std::vector<LossSpec> loss = {};
  std::map<std::string, LossSpec> loss_by_output = {};
  std::vector<double> loss_weights = {};
  std::map<std::string, double> loss_weights_by_output = {};
  std::vector<std::vector<MetricSpec>> metrics = {};
  std::map<std::string, std::vector<MetricSpec>> metrics_by_output = {};
  // Keras' weighted_metrics: metrics updated with the sample weights (fit's sample_weight,
  // class_weight or the output's own weights); one whose log name another metric already has
  // logs as "weighted_<name>" ("<output>_weighted_<name>" with several outputs), as in Keras.
  std::vector<std::vector<MetricSpec>> weighted_metrics = {};
  std::map<std::string, std::vector<MetricSpec>> weighted_metrics_by_output = {};
};

struct ValidationData {
  Tensor x, y;
  // For a model of several inputs or outputs (x and y above stay undefined).
  std::vector<Tensor> inputs = {}, targets = {};
  Tensor sample_weight = {};  // Keras' (x, y, sample_weight) validation tuple
  std::vector<Tensor> output_sample_weights = {};  // or one array per output
  bool defined() const { return x.defined() || y.defined() || !inputs.empty() || !targets.empty(); }
};

// Keras' validation_freq: an integer n (validate after every n-th epoch) or a list of epochs
// (1-based, as Keras counts them: {1, 2, 10} validates after the first, second and tenth).
class ValidationFrequency {
 public:
  ValidationFrequency(int every = 1) : every_(every) {}
  ValidationFrequency(std::initializer_list<int> epochs) : every_(0), listed_(true), epochs_(epochs) {}
  explicit ValidationFrequency(std::vector<int> epochs) : every_(0), listed_(true), epochs_(std::move(epochs)) {}
  // Whether validation runs after the epoch of index `epoch` (0-based).
  bool validates_after(int epoch) const;
  // A ValueError for a frequency below 1, an empty list, or an epoch below 1 in it.
  void check() const;
  // One number for the processes' agreement check: n, or a hash of the list.
  std::int64_t fingerprint() const;

 private:
  int every_;
  bool listed_ = false;
  std::vector<int> epochs_;
};

struct FitOptions {
  std::int64_t batch_size = 32;
  int epochs = 1;
  bool shuffle = true;
  ValidationData validation_data = {};
  std::vector<CallbackPtr> callbacks = {};
  // "auto" (the default): a bar on a terminal, one line per epoch otherwise (the rule and
  // the KERAS_PROGRESS flag are in training/progress_output.h); 0 silent; 1 bar; 2 epoch lines.
  Verbose verbose = "auto";
  std::int64_t validation_batch_size = 0;  // 0: same as batch_size
  // Keras' validation_split: the last fraction of the samples (before shuffling) validates,
  // unless validation_data is given; in [0, 1).
  double validation_split = 0.0;
  // Validation runs after every validation_freq-th epoch, or after the epochs it lists.
  ValidationFrequency validation_freq = 1;
  // The epoch to start at (its index, as in Keras): fit runs epochs initial_epoch .. epochs-1.
  int initial_epoch = 0;
  // Batches per epoch; 0: one pass over the data. With fewer, the next epoch goes on through
  // the same pass; a pass that runs out ends its epoch early (with a warning), as in Keras.
  std::int64_t steps_per_epoch = 0;
  // One weight per sample for the losses (Keras' sample_weight), or one per class
  // (class_weight: single-output models; classes left out weigh 1); one of the two, as Keras.
  Tensor sample_weight = {};
  std::map<std::int64_t, double> class_weight = {};
  // Keras' list or dict of sample weights: one array per output, for that output's loss and
  // weighted metrics (not with sample_weight or class_weight).
  std::vector<Tensor> output_sample_weights = {};
  std::map<std::string, Tensor> sample_weight_by_output = {};
};

struct EvaluateOptions {
  std::int64_t batch_size = 32;
  Verbose verbose = "auto";
  Tensor sample_weight = {};  // one weight per sample for the losses
  // Keras' list or dict of sample weights: one array per output (not with sample_weight).
  std::vector<Tensor> output_sample_weights = {};
  std::map<std::string, Tensor> sample_weight_by_output = {};
};

struct History {
  std::vector<int> epoch;
  std::map<std::string, std::vector<double>> history;
};

// The arrays of one training or evaluation step (Keras' `data`): this process's rows of the
// batch, one array per model input (x) and per output (y), on the model's device.
struct StepData {
  std::vector<Tensor> x, y;
  Tensor sample_weight = {};  // one weight per row (fit's sample_weight and class_weight), or none
  // One weight array per output, when fit was given them by output (Keras' list or dict of
  // sample weights); sample_weight is then undefined. An undefined entry: every row weighs 1.
  std::vector<Tensor> output_sample_weights = {};
  // The weights of output `output`'s loss and weighted metrics (undefined: none).
  const Tensor& sample_weight_of(std::size_t output) const {
    return output_sample_weights.empty() ? sample_weight : output_sample_weights.at(output);
  }
};

// fit's or evaluate's step in progress, which apply_gradients and the default train_step and
// test_step work on (training/trainer.h).
struct ActiveStep;

class Model : public Layer {
 public:
  // A subclassed model (override call) or, through Sequential, a stack of layers.
  explicit Model(const std::string& name = "", const std::string& default_prefix = "functional");
  // Keras' functional API: the model that computes `outputs` from `inputs` (keras::Input
  // tensors), layers/keras_tensor.h. Several outputs come as a vector, or as a map whose keys
  // name them (Keras' dict of outputs, in the keys' sorted order). The layers keep their own
  // paths: a functional model's variables are "dense/kernel", as in Keras.
  Model(const KerasTensor& inputs, const KerasTensor& outputs, const std::string& name = "");
  Model(std::vector<KerasTensor> inputs, std::vector<KerasTensor> outputs, const std::string& name = "");
  Model(std::vector<KerasTensor> inputs, const KerasTensor& output, const std::string& name = "");
  // (A template only so that a braced list {a, b} means the vector form, never a map.)
  template <typename OutputMap>
    requires std::same_as<OutputMap, std::map<std::string, KerasTensor>>
  Model(std::vector<KerasTensor> inputs, const OutputMap& outputs, const std::string& name = "")
      : Model(std::move(inputs), outputs, name, NamedOutputs{}) {}

  // A model hands its inputs to its layers, which decide what layout they need.
  // A functional model runs its graph (one input, one output here); a subclass overrides it.
  Tensor call(const Tensor& inputs, bool training) override;
  // Several inputs and outputs, in the order of the model's inputs and outputs. A functional
  // model runs its graph; the default hands a single input to call(). Override it for a
  // subclassed model that takes several inputs or gives several outputs.
  virtual std::vector<Tensor> call_many(const std::vector<Tensor>& inputs, bool training);
  // Calls the model on several inputs (Keras' model([a, b])) or, symbolically, records it as
  // one node of a larger graph.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs, bool training = false);
  std::vector<KerasTensor> operator()(const std::vector<KerasTensor>& inputs) &;
  using Layer::operator();

  // The layer named `name` among this model's layers (Keras' get_layer); ValueError otherwise.
  LayerPtr get_layer(const std::string& name) const;
  // A functional model's graph; null for Sequential and subclassed models.
  const std::shared_ptr<FunctionalGraph>& graph() const { return graph_; }
  // Keras' output names: the keys of a map of outputs, else the output layers' names; a model
  // that is not functional has the one output "output_0".
  std::vector<std::string> output_names() const;
  std::size_t input_count() const;
  std::size_t output_count() const;

  template <typename O>
    requires std::derived_from<O, optimizers::Optimizer>
  void compile(O optimizer, LossSpec loss, const std::vector<MetricSpec>& metrics = {}) {
    compile(std::make_shared<O>(std::move(optimizer)), std::move(loss), metrics);
  }
  void compile(std::shared_ptr<optimizers::Optimizer> optimizer, LossSpec loss,
               const std::vector<MetricSpec>& metrics = {});
  void compile(const std::string& optimizer, LossSpec loss,
               const std::vector<MetricSpec>& metrics = {});
  // Several outputs: a loss, weight and metrics per output (CompileOptions).
  template <typename O>
    requires std::derived_from<O, optimizers::Optimizer>
  void compile(O optimizer, const CompileOptions& options) {
    compile(std::make_shared<O>(std::move(optimizer)), options);
  }
  void compile(std::shared_ptr<optimizers::Optimizer> optimizer, const CompileOptions& options);
  void compile(const std::string& optimizer, const CompileOptions& options);

  // Several inputs or outputs: one array per input and per output, in the model's order.
  History fit(const std::vector<Tensor>& x, const std::vector<Tensor>& y, const FitOptions& options = {});
  std::map<std::string, double> evaluate(const std::vector<Tensor>& x, const std::vector<Tensor>& y,
                                         const EvaluateOptions& options = {});
  std::vector<Tensor> predict(const std::vector<Tensor>& x, std::int64_t batch_size = 32);

  History fit(const Tensor& x, const Tensor& y, const FitOptions& options = {});
  std::map<std::string, double> evaluate(const Tensor& x, const Tensor& y,
                                         const EvaluateOptions& options = {});
  Tensor predict(const Tensor& x, std::int64_t batch_size = 32);
  // One optimisation step on one batch; returns the batch loss.
  double train_on_batch(const Tensor& x, const Tensor& y);

  // Keras' summary table and, under a distribution, the sharding plan (training/model_summary.h).
  // Printed by process 0; every process may call it.
  void summary();
  std::string summary_text();
  // The collectives of the last training step, by kind and group (empty before one).
  const std::vector<distribution::CollectiveTotal>& last_step_collectives() const {
    return last_step_collectives_;
  }

  void save_weights(const std::string& path);
  void load_weights(const std::string& path);
  // Keras' model.save: a .keras archive (config, weights and, when compiled, the optimizer's
  // state) that keras::load_model and Python Keras' load_model read (saving/keras_archive.h).
  // Sequential and functional models; collective under a distribution as save_weights is.
  void save(const std::string& path);

  // Seconds the last training step spent in gradient collectives (the all-reduces, and the
  // reduce-scatters and all-gathers of variables updated by blocks; 0 without data parallelism).
  double last_gradient_sync_seconds() const;
  // Under DataParallel each process keeps its optimizer state current only in the blocks it
  // updates (distribution/runtime/gradient_reducer.h); this makes the state whole on every process.
  // Collective: every process of the job calls it, before the state is read or saved.
  void gather_optimizer_state();
  // Whether the optimizer's state is current only by blocks (then gather_optimizer_state(), a
  // collective, makes it whole).
  bool optimizer_state_held_by_blocks() const;
  // The losses compile() was given, one per output.
  const std::vector<losses::LossPtr>& compiled_losses() const { return losses_; }
  // Whether compile() was called (an optimizer and a loss are set).
  bool compiled() const { return optimizer_ != nullptr && !losses_.empty(); }

  // Set by callbacks (EarlyStopping) to end fit() after the current epoch.
  bool stop_training = false;
  // fit()'s position: after on_train_batch_end(batch) it is {epoch, batch + 1, …}; during
  // on_epoch_end(epoch) it is {epoch + 1, 0, …}, the start of the next epoch.
  const TrainingPosition& training_position() const { return position_; }
  // From a callback's on_train_begin: fit() goes on from `position` (a training_position()
  // saved earlier, by a run of the same fit call) instead of from the first epoch. Checked
  // against the run's epochs, steps and metrics when fit() takes it.
  void resume_training_from(TrainingPosition position);
  // The compiled metrics' names (what TrainingPosition::totals hold beyond the loss).
  const std::vector<std::string>& metric_names() const { return metric_names_; }
  // How many numbers the logs' totals hold (TrainingPosition::totals): the loss's sum and
  // count, each output loss's (several outputs), then each compiled metric's state.
  std::size_t log_totals_size() const;
  optimizers::Optimizer& optimizer();

  // Keras' train_step, to override for a custom training step (Keras 3's "customizing what
  // happens in fit()"): fit() calls it for each batch with this process's rows, and the logs
  // it returns are the epoch's so far (callbacks and the progress bar see them). An override
  // reads as Keras' does:
  //   Tensor y_pred = (*this)(data.x[0], /*training=*/true);
  //   Tensor loss = compute_loss(data, {y_pred});
  //   apply_gradients(loss);
  //   return compute_metrics(data, {y_pred}, loss);
  // Callbacks, the progress bar, the compiled metrics and, under a distribution, the gradient
  // sums and global logs are all kept. The default is fit's own step, which reads its logs only
  // when something needs them; an override may call it (Keras' super().train_step(data)) and
  // return what it returns.
  virtual Logs train_step(const StepData& data);
  // The same for evaluate() and fit's validation, without gradients:
  //   return compute_metrics(data, {y_pred}, compute_loss(data, {y_pred}));
  virtual Logs test_step(const StepData& data);
  // Keras' compute_loss: the compiled losses of the outputs `y_pred` against data.y, weighted
  // and summed; the mean over this process's rows (outputs may lie sharded, as fit's own).
  Tensor compute_loss(const StepData& data, const std::vector<Tensor>& y_pred);
  // Inside train_step: the gradients of `loss` with respect to the trainable weights, summed
  // over the data-parallel processes as fit's own step sums them (in buckets, during backward),
  // then the optimizer's update (with its clipping). What `loss.backward()` and
  // `optimizer.apply(gradients, trainable_weights)` do in Keras' guide on PyTorch.
  void apply_gradients(const Tensor& loss);
  // Inside train_step or test_step: adds `loss` to the loss tracker (weighted by this process's
  // rows) and the batch to the compiled metrics, and returns metric_results(), as Keras'
  // loss tracker update and compute_metrics do together.
  Logs compute_metrics(const StepData& data, const std::vector<Tensor>& y_pred, const Tensor& loss);
  // Keras' model.metrics: the loss tracker (a Mean named "loss"), with several outputs each
  // output's loss tracker ("<output>_loss", updated by compute_loss, as Keras' compiled loss
  // does), and the compiled metrics, in the order of their logs. fit and evaluate reset them
  // at each epoch and evaluation.
  std::vector<metrics::MetricPtr> metrics() const;
  // Every metric of metrics() by its log name, over all the data-parallel processes (one
  // all-reduce of their states): what a train_step returns, the same on every process.
  Logs metric_results();

 private:
  // The loops of fit, evaluate, predict and train_on_batch (training/trainer.h) run on this state.
  friend class Trainer;
  void check_compiled(const char* what) const;

  std::shared_ptr<optimizers::Optimizer> optimizer_;
  // One loss, weight and list of metric names per output.
  std::vector<losses::LossPtr> losses_;
  std::vector<double> loss_weights_;
  std::vector<std::vector<MetricSpec>> output_metrics_;
  // What the logs hold beyond "loss", in order: each output's loss (several outputs), then
  // each output's metrics.
  std::vector<std::string> metric_names_;
  // The metric objects of output_metrics_ (made from their names at compile) with their
  // outputs, in the order of their log names; and the loss tracker.
  std::vector<CompiledMetric> compiled_metrics_;
  std::shared_ptr<metrics::Mean> loss_tracker_ = std::make_shared<metrics::Mean>("loss");
  std::vector<std::shared_ptr<metrics::Mean>> output_loss_trackers_;  // several outputs only
  ActiveStep* active_step_ = nullptr;  // set by the trainer while a step runs
  ActiveStep& require_active_step(const char* what, bool training) const;
  std::shared_ptr<distribution::GradientReducer> gradient_reducer_;
  std::vector<distribution::CollectiveTotal> last_step_collectives_;
  bool plan_checked_ = false;  // fit() warns about the plan once, after its first step
  TrainingPosition position_;
  std::optional<TrainingPosition> resume_from_;
  std::shared_ptr<FunctionalGraph> graph_;
  void adopt_graph(std::shared_ptr<FunctionalGraph> graph);
  struct NamedOutputs {};
  Model(std::vector<KerasTensor> inputs, const std::map<std::string, KerasTensor>& outputs,
        const std::string& name, NamedOutputs);

 public:
  // How the last data-parallel step grouped and reduced its gradients (buckets, in-place
  // reductions; null before one), for users tuning the bucket size, as DDP's logging data is.
  const distribution::GradientReducer* gradient_reducer() const { return gradient_reducer_.get(); }
};

// What the labels of `loss` are, which decides what the metric "accuracy" means.
metrics::LabelKind label_kind(const losses::Loss& loss);

class Sequential : public Model {
 public:
  explicit Sequential(std::vector<AnyLayer> layers = {}, const std::string& name = "");
  void add(AnyLayer layer);
  Tensor call(const Tensor& inputs, bool training) override;
};

}  // namespace keras
