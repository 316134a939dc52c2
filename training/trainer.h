// The trainer behind Model's fit, evaluate, predict and train_on_batch: the batch loops, the
// optimisation step with its gradient collectives, and the logs callbacks see. Internal: users
// call the Model methods, which hand their model to a Trainer for the length of one call.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "distribution/runtime/batch_shard.h"
#include "training/model.h"

namespace keras {

// The arrays of a call: one per model input (x) or per model output (y), in the model's order.
using TensorList = std::vector<Tensor>;

// The sample weights of a fit or evaluate call: none, one array that weighs every output, or
// one array per output (Keras' list or dict; an undefined entry weighs each row 1). Each array
// holds one weight per sample (per timestep too, for sequence losses).
struct SampleWeights {
  Tensor shared;
  TensorList per_output;
  bool defined() const { return shared.defined() || !per_output.empty(); }
};

class Trainer {
 public:
  explicit Trainer(Model& model) : model_(model) {}

  History fit(const TensorList& x, const TensorList& y, const FitOptions& options);
  std::map<std::string, double> evaluate(const TensorList& x, const TensorList& y,
                                         const EvaluateOptions& options);
  TensorList predict(const TensorList& x, std::int64_t batch_size);
  double train_on_batch(const TensorList& x, const TensorList& y);

  struct StepResult {
    Tensor loss;  // mean over this process's rows, a scalar left on the device (undefined for none)
    TensorList output_losses;  // each output's weighted loss, with several outputs (else empty)
    TensorList predictions;    // per output; whole (data layout) for the outputs that have metrics
    // Whether any process asked for the logs after this step, where that flag rode the
    // gradients (train_step's read_logs_here); unset where it could not.
    std::optional<bool> read_logs_on_any_process;
  };

  // The total loss: each output's loss on the outputs as they lie, weighted, summed; with
  // several outputs each weighted loss is added to `output_losses` (detached) too.
  // data.sample_weight_of(i) (one per row, or undefined) weighs output i's per-sample losses.
  Tensor compute_loss(const StepData& data, const TensorList& outputs, TensorList* output_losses);

 private:
  // The arrays agree with the model (one per input and output) and have one sample count.
  void check_data(const TensorList& x, const TensorList& y, const char* what) const;
  // The model's outputs for `x`, one per output.
  TensorList forward(const TensorList& x, bool training);
  // What the metrics read: each output that has metrics, whole (the data layout), detached.
  TensorList metric_inputs(const TensorList& outputs) const;
  // One optimisation step on this process's rows of a global batch; `loss_scale` is
  // local_rows / global_rows when the batch is split over processes (1 otherwise), see
  // distribution/runtime/batch_shard.h; `rows` places this process's rows in the global batch (null when
  // it is not split). `read_logs_here`: whether this process wants the logs after the step,
  // agreed with the others through the gradients where it can (StepResult).
  StepResult train_step(const StepData& data, double loss_scale, const BatchShard& context,
                        const BatchShard::Rows* rows, std::optional<bool> read_logs_here = std::nullopt);
  // train_step's second half: the gradients of `loss` summed over the data-parallel group
  // (scaled by `loss_scale`, in buckets during backward), then the optimizer's update.
  // `read_logs_on_any_process`, when given, receives the flag that rode the gradients.
  void apply_gradients(const Tensor& loss, double loss_scale, const BatchShard& context,
                       std::optional<bool> read_logs_here, std::optional<bool>* read_logs_on_any_process);
  // Calls the model's train_step (Model::train_step) for one batch: the default runs
  // train_step() above and its result is returned; an override's logs go to `custom_logs`.
  std::optional<StepResult> call_train_step(const StepData& batch, double loss_scale,
                                            const BatchShard& context, const BatchShard::Rows* rows,
                                            std::optional<bool> read_logs_here, std::optional<Logs>& custom_logs);
  // evaluate() after its checks; fit() runs it on the validation data.
  std::map<std::string, double> run_evaluation(const TensorList& x, const TensorList& y, const SampleWeights& weights,
                                               std::int64_t batch_size, int verbose);

  Model& model_;
};

// fit's or evaluate's step in progress (Model::active_step_): what the default train_step and
// test_step and Model::apply_gradients ask of the trainer.
struct ActiveStep {
  bool training = true;
  std::function<Trainer::StepResult(const StepData&)> run_builtin;  // fit's or evaluate's own step
  std::function<void(const Tensor& loss)> apply_gradients;          // training only
  std::optional<Trainer::StepResult> builtin_result;               // set when the default step ran
};

}  // namespace keras
