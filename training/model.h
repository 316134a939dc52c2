// Model: a Layer that can be trained. compile / fit / evaluate / predict follow Keras: fit
// returns a History, metrics are means over all samples seen, callbacks see Keras' logs
// ("loss", "accuracy", "val_loss", …), and save_weights / load_weights use safetensors keyed by
// variable path. Sequential stacks layers; subclass Model (override call) for custom models.
#pragma once
#include <concepts>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distribution/runtime/collective_log.h"
#include "engine/losses.h"
#include "engine/optimizers.h"
#include "training/callbacks.h"
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
  const losses::LossPtr& get() const { return loss_; }

 private:
  losses::LossPtr loss_;
};

struct ValidationData {
  Tensor x, y;
  bool defined() const { return x.defined() || y.defined(); }
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
};

struct EvaluateOptions {
  std::int64_t batch_size = 32;
  Verbose verbose = "auto";
};

struct History {
  std::vector<int> epoch;
  std::map<std::string, std::vector<double>> history;
};

class Model : public Layer {
 public:
  explicit Model(const std::string& name = "", const std::string& default_prefix = "functional");
  // A model hands its inputs to its layers, which decide what layout they need.

  template <typename O>
    requires std::derived_from<O, optimizers::Optimizer>
  void compile(O optimizer, LossSpec loss, const std::vector<std::string>& metrics = {}) {
    compile(std::make_shared<O>(std::move(optimizer)), std::move(loss), metrics);
  }
  void compile(std::shared_ptr<optimizers::Optimizer> optimizer, LossSpec loss,
               const std::vector<std::string>& metrics = {});
  void compile(const std::string& optimizer, LossSpec loss,
               const std::vector<std::string>& metrics = {});

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

  // Seconds the last training step spent in gradient collectives (the all-reduces, and the
  // reduce-scatters and all-gathers of variables updated by blocks; 0 without data parallelism).
  double last_gradient_sync_seconds() const;
  // Under DataParallel each process keeps its optimizer state current only in the blocks it
  // updates (distribution/runtime/gradient_reducer.h); this makes the state whole on every process.
  // Collective: every process of the job calls it, before the state is read or saved.
  void gather_optimizer_state();

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
  optimizers::Optimizer& optimizer();

 private:
  // The loops of fit, evaluate, predict and train_on_batch (training/trainer.h) run on this state.
  friend class Trainer;
  void check_compiled(const char* what) const;

  std::shared_ptr<optimizers::Optimizer> optimizer_;
  losses::LossPtr loss_;
  std::vector<std::string> metric_names_;
  std::shared_ptr<distribution::GradientReducer> gradient_reducer_;
  std::vector<distribution::CollectiveTotal> last_step_collectives_;
  bool plan_checked_ = false;  // fit() warns about the plan once, after its first step
  TrainingPosition position_;
  std::optional<TrainingPosition> resume_from_;

 public:
  // How the last data-parallel step grouped and reduced its gradients (buckets, in-place
  // reductions; null before one), for users tuning the bucket size, as DDP's logging data is.
  const distribution::GradientReducer* gradient_reducer() const { return gradient_reducer_.get(); }
};

class Sequential : public Model {
 public:
  explicit Sequential(std::vector<AnyLayer> layers = {}, const std::string& name = "");
  void add(AnyLayer layer);
  Tensor call(const Tensor& inputs, bool training) override;
};

}  // namespace keras
