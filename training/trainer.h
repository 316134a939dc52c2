// The trainer behind Model's fit, evaluate, predict and train_on_batch: the batch loops, the
// optimisation step with its gradient collectives, and the logs callbacks see. Internal: users
// call the Model methods, which hand their model to a Trainer for the length of one call.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "distribution/runtime/batch_shard.h"
#include "training/model.h"

namespace keras {

class Trainer {
 public:
  explicit Trainer(Model& model) : model_(model) {}

  History fit(const Tensor& x, const Tensor& y, const FitOptions& options);
  std::map<std::string, double> evaluate(const Tensor& x, const Tensor& y,
                                         const EvaluateOptions& options);
  Tensor predict(const Tensor& x, std::int64_t batch_size);
  double train_on_batch(const Tensor& x, const Tensor& y);

 private:
  struct StepResult {
    Tensor loss;  // mean over this process's rows, a scalar left on the device (undefined for none)
    Tensor predictions;
    // Whether any process asked for the logs after this step, where that flag rode the
    // gradients (train_step's read_logs_here); unset where it could not.
    std::optional<bool> read_logs_on_any_process;
  };
  void check_data(const Tensor& x, const Tensor& y, const char* what) const;
  // One optimisation step on this process's rows of a global batch; `loss_scale` is
  // local_rows / global_rows when the batch is split over processes (1 otherwise), see
  // distribution/runtime/batch_shard.h; `rows` places this process's rows in the global batch (null when
  // it is not split). `read_logs_here`: whether this process wants the logs after the step,
  // agreed with the others through the gradients where it can (StepResult).
  StepResult train_step(const Tensor& x, const Tensor& y, double loss_scale,
                        const BatchShard& context, const BatchShard::Rows* rows,
                        std::optional<bool> read_logs_here = std::nullopt);
  // evaluate() after its checks; fit() runs it on the validation data.
  std::map<std::string, double> run_evaluation(const Tensor& x, const Tensor& y,
                                               std::int64_t batch_size, int verbose);

  Model& model_;
};

}  // namespace keras
