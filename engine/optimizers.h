// Optimizers with Keras' names, defaults and update rules (SGD with momentum and Nesterov,
// Adam, AdamW, RMSprop, Adagrad), and Keras' gradient clipping (clipnorm, clipvalue,
// global_clipnorm). Each step runs one fused in-place kernel per variable (engine/backend.h).
#pragma once
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/learning_rate_schedules.h"
#include "engine/tensor.h"

namespace keras::optimizers {

// An optimizer's learning_rate argument: a number, or a schedule of the step count (Keras'
// learning_rate=keras.optimizers.schedules.…): SGD(0.1), Adam(schedules::CosineDecay(1e-3, 1000)).
class LearningRate {
 public:
  LearningRate(double value) : value_(value) {}
  LearningRate(schedules::SchedulePtr schedule) : schedule_(std::move(schedule)) {}
  template <typename S>
    requires std::derived_from<S, schedules::LearningRateSchedule>
  LearningRate(S schedule) : schedule_(std::make_shared<S>(std::move(schedule))) {}
  double value() const { return value_; }
  const schedules::SchedulePtr& schedule() const { return schedule_; }

 private:
  double value_ = 0.0;
  schedules::SchedulePtr schedule_;
};

class Optimizer {
 public:
  Optimizer(LearningRate learning_rate, double weight_decay, std::string name);
  virtual ~Optimizer() = default;

  // Updates each variable from its gradient (same order, same shapes); skips undefined grads.
  void apply(const std::vector<Tensor>& variables, const std::vector<Tensor>& gradients);
  // Updates elements [offset, offset + gradient_block.size()) of `variable` (in its flat
  // order) from their gradient, with the same elements of its state: for a data-parallel
  // process that updates only its block (distribution/runtime/gradient_reducer.h). Called after this
  // step's apply(), which counts the step; the state keeps the whole variable's shape.
  void apply_to_block(const Tensor& variable, std::int64_t offset, const Tensor& gradient_block);
  // The rate the next update will use: the schedule's at iterations() when there is one.
  double learning_rate() const;
  // Sets a fixed rate; an optimizer made with a schedule refuses it, as Keras does.
  void set_learning_rate(double value);
  const schedules::SchedulePtr& learning_rate_schedule() const { return schedule_; }
  // The updates made (Keras' iterations): with gradient_accumulation_steps, the calls of
  // apply() divided by the steps, as Keras counts them.
  std::int64_t iterations() const;
  const std::string& name() const { return name_; }
  // Bytes of per-variable state held (Adam: two moments per variable, each the variable's
  // shape, so a sharded variable's moments are its local block's size).
  std::size_t state_bytes() const;

  // The optimizer's state, for checkpoints that resume training (BackupAndRestore): the
  // per-variable slots of `variable` (SGD: momentum; Adam: first and second moments; empty
  // before its first update) and the step count the bias corrections use.
  std::vector<Tensor> slots_of(const Tensor& variable) const;
  // Replaces the slots of `variable`; each must have its shape and dtype.
  void set_slots(const Tensor& variable, const std::vector<Tensor>& slots);
  void set_iterations(std::int64_t value);
  // The per-variable state outside the slots: the gradient sum in progress
  // (gradient_accumulation_steps) and the moving average (use_ema), each undefined where there
  // is none; and the calls of apply() made, which place the next one in its accumulation
  // cycle. A backup taken between two updates resumes with them as the run was.
  struct OutsideSlots {
    Tensor accumulated, average;
  };
  OutsideSlots outside_slots_of(const Tensor& variable) const;
  // Replaces them (undefined: none); each must have the variable's shape and dtype.
  void set_outside_slots(const Tensor& variable, const OutsideSlots& state);
  std::int64_t calls() const { return calls_; }
  void set_calls(std::int64_t value);

  // Keras' gradient clipping, applied by apply() before the weight decay and the update; at
  // most one of the three may be set (Keras refuses two), each a finite number > 0, or 0 for
  // none. clipnorm scales each gradient to an L2 norm of at most `value`; global_clipnorm
  // scales all of them by one factor so that their joint norm is at most `value`; clipvalue
  // clips each element to [-value, value].
  Optimizer& set_clipnorm(double value);
  Optimizer& set_global_clipnorm(double value);
  Optimizer& set_clipvalue(double value);
  double clipnorm() const { return clipnorm_; }
  double global_clipnorm() const { return global_clipnorm_; }
  double clipvalue() const { return clipvalue_; }
  bool clips_by_norm() const { return clipnorm_ > 0 || global_clipnorm_ > 0; }
  bool clips() const { return clips_by_norm() || clipvalue_ > 0; }

  // Keras 3's gradient_accumulation_steps: apply() adds each call's gradients up and updates
  // the variables every `steps`-th call with their mean (clipped then); the calls between
  // update nothing; iterations() counts updates (schedules and Adam's bias correction see
  // them), as Keras'. 0 or 1: every call updates. The sums in progress are not part
  // of slots_of() but outside_slots_of(), which BackupAndRestore saves with calls().
  Optimizer& set_gradient_accumulation_steps(int steps);
  int gradient_accumulation_steps() const { return accumulation_steps_; }
  // Keras' use_ema: after each call, an exponential moving average of each variable,
  // average = momentum * average + (1 - momentum) * variable (the first call copies it); every
  // `overwrite_frequency`-th call (0: never) writes the averages into the variables, and
  // finalize_variable_values() does at the end of fit().
  Optimizer& set_ema(bool use_ema, double momentum = 0.99, int overwrite_frequency = 0);
  bool use_ema() const { return use_ema_; }
  double ema_momentum() const { return ema_momentum_; }
  int ema_overwrite_frequency() const { return ema_overwrite_frequency_; }
  // Keras' finalize_variable_values: with use_ema, the variables take their averages.
  void finalize_variable_values(const std::vector<Tensor>& variables);
  // Whether apply() must see whole variables: clipping (whole norms), accumulation and the
  // moving averages (per-variable state outside the slots). A data-parallel trainer then
  // updates whole variables rather than blocks (distribution/runtime/gradient_reducer.h).
  bool needs_whole_variables() const {
    return clips() || accumulation_steps_ > 1 || use_ema_ || loss_scaling_;
  }

  // How the squared L2 norms of this process's gradients (one per variable, of its local
  // block) become the whole variables' norms, for clipnorm and global_clipnorm. Without one
  // the local norms are the whole ones (one process). Under a distribution the trainer sets
  // one that adds the blocks over the processes, counting each block once, in one all-reduce
  // (distribution/runtime/gradient_norms.h).
  using SquaredNormSum = std::function<void(const std::vector<Tensor>& variables, std::vector<double>& squared_norms)>;
  void set_squared_norm_sum(SquaredNormSum sum) { squared_norm_sum_ = std::move(sum); }
  // The slots (slot_of's indices) in the order Keras' build() makes its optimizer variables,
  // which is their order in Keras' weight files: each inner list is one add_optimizer_variables
  // call, its slots interleaved variable by variable (Adam: {{0, 1}}, momentum then velocity of
  // each variable; RMSprop: {{0}, {1}, {2}}, every velocity, then every momentum, ...). An
  // optimizer of one's own overrides it to have its state in those files; the default saves
  // none.
  virtual std::vector<std::vector<int>> keras_slot_order() const { return {}; }
  // Keras' name of the class ("Adam") and its own constructor arguments as Keras' get_config
  // names them (beta_1, ...; booleans as 0 or 1), for a .keras archive's compile_config. The
  // learning rate and weight decay are the base's. Empty name: Keras has no such optimizer.
  struct KerasArgument {
    std::string name;
    double value;
    bool boolean = false;
  };
  virtual std::string keras_class_name() const { return ""; }
  virtual std::vector<KerasArgument> keras_arguments() const { return {}; }
  double weight_decay() const { return weight_decay_; }

  // Dynamic loss scaling (Keras' LossScaleOptimizer, below): the trainer backpropagates
  // scale_loss(loss) (the loss itself when scaling is off), and apply() first checks the
  // gradients: any inf or NaN skips the step (no update, iterations() unchanged) and halves the
  // scale; finite gradients are divided by the scale and applied, and after
  // `dynamic_growth_steps` finite steps in a row the scale doubles. Under DataParallel the
  // check reads the all-reduced gradients, under ModelParallel each block's verdict is added
  // over the processes (set_squared_norm_sum's hook), so every process decides alike.
  void enable_loss_scaling(double initial_scale = 32768.0, int dynamic_growth_steps = 2000);
  bool scales_loss() const { return loss_scaling_; }
  double loss_scale() const { return loss_scale_; }  // Keras' dynamic_scale
  double initial_loss_scale() const { return initial_loss_scale_; }
  int loss_scale_growth_steps() const { return growth_steps_; }
  std::int64_t finite_steps_in_a_row() const { return finite_steps_; }  // Keras' step_counter
  // Where a saved run left the scale (weight files, backups): a finite scale > 0 and a count
  // of finite steps >= 0; a ValueError otherwise, or when loss scaling is off. A count at or
  // past this optimizer's growth steps (a file saved with more) doubles the scale at the next
  // finite step (Keras compares for equality and would then never double again).
  void set_loss_scale_state(double scale, std::int64_t finite_steps_in_a_row);
  Tensor scale_loss(const Tensor& loss) const;

 protected:
  virtual void update(Tensor& variable, const Tensor& gradient) = 0;
  // The rate of the update being made (the schedule's at the step being taken).
  double step_learning_rate() const { return step_learning_rate_; }
  // Per-variable state (momentum, moments), created filled with `initial_value` (zero unless
  // the optimizer starts it elsewhere: Adagrad's accumulator) on first use.
  Tensor& slot(const Tensor& variable, int index, double initial_value = 0.0);
  double weight_decay_;

 private:
  // The gradients apply() updates with: clipped as set (the same tensors when nothing is).
  std::vector<Tensor> clip_gradients(const std::vector<Tensor>& variables, const std::vector<Tensor>& gradients) const;
  void set_clipping(double value, const char* what, double& field);
  int accumulation_steps_ = 0;
  std::unordered_map<TensorImpl*, Tensor> accumulated_;
  bool use_ema_ = false;
  double ema_momentum_ = 0.99;
  int ema_overwrite_frequency_ = 0;
  std::unordered_map<TensorImpl*, Tensor> averages_;
  double clipnorm_ = 0.0, global_clipnorm_ = 0.0, clipvalue_ = 0.0;
  SquaredNormSum squared_norm_sum_;
  double learning_rate_;
  schedules::SchedulePtr schedule_;
  double step_learning_rate_ = 0.0;
  std::int64_t calls_ = 0;  // of apply()
  bool loss_scaling_ = false;
  double loss_scale_ = 1.0;
  double initial_loss_scale_ = 1.0;
  int growth_steps_ = 2000;
  std::int64_t finite_steps_ = 0;
  std::string name_;
  std::unordered_map<TensorImpl*, std::vector<Tensor>> slots_;
  // During apply_to_block: the view being updated, and its place in the whole variable, so
  // that slot() hands out the same view of the whole variable's slots.
  struct Block {
    const TensorImpl* view = nullptr;
    Tensor variable;
    std::int64_t offset = 0;
    std::vector<Tensor> slot_views;
  };
  Block block_;
};

class SGD : public Optimizer {
 public:
  explicit SGD(LearningRate learning_rate = 0.01, double momentum = 0.0, bool nesterov = false,
               double weight_decay = 0.0);

  std::vector<std::vector<int>> keras_slot_order() const override;
  std::string keras_class_name() const override { return "SGD"; }
  std::vector<KerasArgument> keras_arguments() const override {
    return {{"momentum", momentum_}, {"nesterov", nesterov_ ? 1.0 : 0.0, true}};
  }
 protected:
  void update(Tensor& variable, const Tensor& gradient) override;

 private:
  double momentum_;
  bool nesterov_;
};

class Adam : public Optimizer {
 public:
  explicit Adam(LearningRate learning_rate = 0.001, double beta_1 = 0.9, double beta_2 = 0.999,
                double epsilon = 1e-7, double weight_decay = 0.0);

  std::vector<std::vector<int>> keras_slot_order() const override;
  std::string keras_class_name() const override { return name() == "AdamW" ? "AdamW" : "Adam"; }
  std::vector<KerasArgument> keras_arguments() const override {
    return {{"beta_1", beta_1_}, {"beta_2", beta_2_}, {"epsilon", epsilon_}, {"amsgrad", 0.0, true}};
  }
 protected:
  Adam(LearningRate learning_rate, double beta_1, double beta_2, double epsilon, double weight_decay,
       std::string name);
  void update(Tensor& variable, const Tensor& gradient) override;

 private:
  double beta_1_, beta_2_, epsilon_;
};

// Adam with decoupled weight decay (Keras' default weight_decay=0.004).
class AdamW : public Adam {
 public:
  explicit AdamW(LearningRate learning_rate = 0.001, double weight_decay = 0.004, double beta_1 = 0.9,
                 double beta_2 = 0.999, double epsilon = 1e-7);
};

class RMSprop : public Optimizer {
 public:
  explicit RMSprop(LearningRate learning_rate = 0.001, double rho = 0.9, double momentum = 0.0,
                   double epsilon = 1e-7, bool centered = false, double weight_decay = 0.0);

  std::vector<std::vector<int>> keras_slot_order() const override;
  std::string keras_class_name() const override { return "RMSprop"; }
  std::vector<KerasArgument> keras_arguments() const override {
    return {{"rho", rho_}, {"momentum", momentum_}, {"epsilon", epsilon_}, {"centered", centered_ ? 1.0 : 0.0, true}};
  }
 protected:
  void update(Tensor& variable, const Tensor& gradient) override;

 private:
  double rho_, momentum_, epsilon_;
  bool centered_;
};

class Adagrad : public Optimizer {
 public:
  explicit Adagrad(LearningRate learning_rate = 0.001, double initial_accumulator_value = 0.1,
                   double epsilon = 1e-7, double weight_decay = 0.0);

  std::vector<std::vector<int>> keras_slot_order() const override;
  std::string keras_class_name() const override { return "Adagrad"; }
  std::vector<KerasArgument> keras_arguments() const override {
    return {{"initial_accumulator_value", initial_accumulator_value_}, {"epsilon", epsilon_}};
  }
 protected:
  void update(Tensor& variable, const Tensor& gradient) override;

 private:
  double initial_accumulator_value_, epsilon_;
};

// By Keras name with default settings: sgd, adam, adamw, rmsprop, adagrad. Throws ValueError
// otherwise.
std::shared_ptr<Optimizer> get(const std::string& name);

// Keras' LossScaleOptimizer for mixed_float16 (float16's range ends at 65504 and its smallest
// normal is 6e-5: small gradients would flush to zero unscaled): the inner optimizer with
// dynamic loss scaling on, Keras' defaults (initial_scale 2^15, dynamic_growth_steps 2000).
// LossScaleOptimizer(Adam(1e-3)) is an Adam in every other respect.
template <typename Inner>
  requires std::derived_from<Inner, Optimizer>
class LossScaleOptimizer : public Inner {
 public:
  explicit LossScaleOptimizer(Inner inner, double initial_scale = 32768.0, int dynamic_growth_steps = 2000)
      : Inner(std::move(inner)) {
    this->enable_loss_scaling(initial_scale, dynamic_growth_steps);
  }
};

}  // namespace keras::optimizers
