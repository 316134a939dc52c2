// Optimizer bookkeeping (iterations, slots, argument checks); the arithmetic is in the
// backends' fused update kernels.
#include "engine/optimizers.h"

#include <algorithm>
#include <cmath>

#include "engine/backend.h"
#include "engine/errors.h"
#include "engine/ops.h"

namespace keras::optimizers {
namespace {
void check_range(double value, double low, double high, const char* what, bool high_open) {
  bool ok = std::isfinite(value) && value >= low && (high_open ? value < high : value <= high);
  if (!ok) {
    throw ValueError(str(what, " must be in [", low, ", ", high, high_open ? ")" : "]", ", got ",
                         value));
  }
}
}  // namespace

Optimizer::Optimizer(LearningRate learning_rate, double weight_decay, std::string name)
    : weight_decay_(weight_decay), learning_rate_(learning_rate.value()), schedule_(learning_rate.schedule()),
      name_(std::move(name)) {
  if (!schedule_) set_learning_rate(learning_rate.value());
  check_range(weight_decay, 0.0, 1.0, "weight_decay", false);
}

double Optimizer::learning_rate() const { return schedule_ ? (*schedule_)(iterations()) : learning_rate_; }

std::int64_t Optimizer::iterations() const { return accumulation_steps_ > 1 ? calls_ / accumulation_steps_ : calls_; }

void Optimizer::set_learning_rate(double value) {
  if (schedule_) {
    throw ValueError(str(name_, " was made with a learning rate schedule, which sets its rate at each step; ",
                         "setting it to ", value, " would be overwritten (make the optimizer with a number to ",
                         "change its rate from a callback)"));
  }
  if (!std::isfinite(value) || value < 0) {
    throw ValueError(str("learning_rate must be a finite number >= 0, got ", value));
  }
  learning_rate_ = value;
}

void Optimizer::apply(const std::vector<Tensor>& variables, const std::vector<Tensor>& gradients) {
  if (variables.size() != gradients.size()) {
    throw ValueError(str(name_, ": got ", variables.size(), " variables and ", gradients.size(),
                         " gradients; expected one gradient per variable"));
  }
  // The rate of this step: the schedule's at the step count before it, as Keras evaluates it.
  step_learning_rate_ = learning_rate();
  if (!std::isfinite(step_learning_rate_) || step_learning_rate_ < 0) {
    throw ValueError(str(name_, ": the learning rate schedule gave ", step_learning_rate_, " at step ", iterations(),
                         "; a rate must be a finite number >= 0"));
  }
  for (std::size_t i = 0; i < variables.size(); ++i) {
    if (!gradients[i].defined()) continue;
    if (gradients[i].shape() != variables[i].shape() || gradients[i].dtype() != variables[i].dtype()) {
      throw ShapeError(str(name_, ": gradient of shape ", shape_to_string(gradients[i].shape()),
                           " (", dtype_name(gradients[i].dtype()), ") for variable '",
                           variables[i].name(), "' of shape ", shape_to_string(variables[i].shape()),
                           " (", dtype_name(variables[i].dtype()), ")"));
    }
  }
  std::vector<Tensor> unscaled;
  if (loss_scaling_) {
    NoGradGuard no_grad;
    // One reduction a gradient: max |g| is inf or NaN exactly when some element is. Under
    // ModelParallel a gradient is this process's block: the flags are added over the processes
    // that hold the other blocks (the hook clipping uses), so every process decides alike.
    std::vector<Tensor> present;
    std::vector<double> non_finite;
    for (std::size_t i = 0; i < gradients.size(); ++i) {
      if (!gradients[i].defined()) continue;
      present.push_back(variables[i]);
      const bool finite_here = gradients[i].size() == 0 || std::isfinite(ops::max(ops::abs(gradients[i])).item());
      non_finite.push_back(finite_here ? 0.0 : 1.0);
    }
    if (squared_norm_sum_) squared_norm_sum_(present, non_finite);
    bool finite = true;
    for (double flag : non_finite) finite = finite && flag == 0.0;
    if (!finite) {
      loss_scale_ /= 2;
      finite_steps_ = 0;
      return;
    }
    for (const Tensor& gradient : gradients) {
      unscaled.push_back(gradient.defined() ? gradient * (1.0 / loss_scale_) : gradient);
    }
    if (++finite_steps_ >= growth_steps_) {
      loss_scale_ *= 2;
      finite_steps_ = 0;
    }
  }
  const std::vector<Tensor>& given = loss_scaling_ ? unscaled : gradients;
  const std::int64_t call = calls_;  // this call's index, before it counts
  const std::int64_t updates_before = iterations();
  calls_ += 1;
  NoGradGuard no_grad;
  std::vector<Tensor> to_apply = given;
  bool updates = true;
  if (accumulation_steps_ > 1) {
    // Keras' accumulation: add up; on every steps-th call, the mean of the sums updates.
    updates = (call + 1) % accumulation_steps_ == 0;
    for (std::size_t i = 0; i < variables.size(); ++i) {
      if (!given[i].defined()) continue;
      Tensor gradient = given[i].device() == variables[i].device() ? given[i] : given[i].to(variables[i].device());
      auto found = accumulated_.find(variables[i].impl());
      if (updates) {
        Tensor sum = found == accumulated_.end() ? gradient : gradient + found->second;
        to_apply[i] = sum * (1.0 / accumulation_steps_);
        if (found != accumulated_.end()) accumulated_.erase(found);
      } else if (found == accumulated_.end()) {
        accumulated_.emplace(variables[i].impl(), gradient + 0.0);  // a copy: the caller's grad is zeroed after
      } else {
        found->second = found->second + gradient;
      }
    }
  }
  if (updates) {
    std::vector<Tensor> clipped = clip_gradients(variables, to_apply);
    for (std::size_t i = 0; i < variables.size(); ++i) {
      if (!clipped[i].defined()) continue;
      Tensor variable = variables[i];
      update(variable, clipped[i].device() == variable.device() ? clipped[i] : clipped[i].to(variable.device()));
    }
  }
  if (use_ema_) {
    // After every call; momentum 0 before the first update (a copy), as Keras' (iterations != 0).
    const double momentum = updates_before == 0 ? 0.0 : ema_momentum_;
    const bool overwrite = ema_overwrite_frequency_ > 0 && (call + 1) % ema_overwrite_frequency_ == 0;
    for (const Tensor& variable : variables) {
      auto found = averages_.find(variable.impl());
      if (found == averages_.end()) {
        found = averages_.emplace(variable.impl(), Tensor::zeros(variable.shape(), variable.dtype(), variable.device())).first;
      }
      found->second.assign(found->second * momentum + variable * (1.0 - momentum));
      if (overwrite) Tensor(variable).assign(found->second);
    }
  }
}

void Optimizer::enable_loss_scaling(double initial_scale, int dynamic_growth_steps) {
  if (!(initial_scale > 0) || !std::isfinite(initial_scale)) {
    throw ValueError(str(name_, ": LossScaleOptimizer's initial_scale must be a finite number > 0, got ", initial_scale));
  }
  if (dynamic_growth_steps < 1) {
    throw ValueError(str(name_, ": LossScaleOptimizer's dynamic_growth_steps must be >= 1, got ", dynamic_growth_steps));
  }
  loss_scaling_ = true;
  loss_scale_ = initial_scale;
  initial_loss_scale_ = initial_scale;
  growth_steps_ = dynamic_growth_steps;
  finite_steps_ = 0;
}

void Optimizer::set_loss_scale_state(double scale, std::int64_t finite_steps_in_a_row) {
  if (!loss_scaling_) {
    throw ValueError(str(name_, ": set_loss_scale_state needs loss scaling on (LossScaleOptimizer); this "
                                "optimizer does not scale its loss"));
  }
  if (!(scale > 0) || !std::isfinite(scale)) {
    throw ValueError(str(name_, ": a loss scale must be a finite number > 0, got ", scale));
  }
  if (finite_steps_in_a_row < 0) {
    throw ValueError(str(name_, ": the count of finite steps in a row must be >= 0, got ", finite_steps_in_a_row));
  }
  loss_scale_ = scale;
  finite_steps_ = finite_steps_in_a_row;
}

Tensor Optimizer::scale_loss(const Tensor& loss) const { return loss_scaling_ ? loss * loss_scale_ : loss; }

Optimizer& Optimizer::set_gradient_accumulation_steps(int steps) {
  if (steps < 0) throw ValueError(str(name_, ": gradient_accumulation_steps must be >= 0 (0 or 1: none), got ", steps));
  if (!accumulated_.empty()) {
    throw ValueError(str(name_, ": gradient_accumulation_steps changed while ", accumulated_.size(),
                         " gradient sums are in progress; change it between updates"));
  }
  const std::int64_t updates = iterations();
  accumulation_steps_ = steps;
  calls_ = updates * std::max(accumulation_steps_, 1);  // the update count stays
  return *this;
}

Optimizer& Optimizer::set_ema(bool use_ema, double momentum, int overwrite_frequency) {
  check_range(momentum, 0.0, 1.0, "ema_momentum", false);
  if (overwrite_frequency < 0) {
    throw ValueError(str(name_, ": ema_overwrite_frequency must be >= 0 (0: never), got ", overwrite_frequency));
  }
  use_ema_ = use_ema;
  ema_momentum_ = momentum;
  ema_overwrite_frequency_ = overwrite_frequency;
  if (!use_ema) averages_.clear();
  return *this;
}

void Optimizer::finalize_variable_values(const std::vector<Tensor>& variables) {
  if (!use_ema_) return;
  NoGradGuard no_grad;
  for (const Tensor& variable : variables) {
    auto found = averages_.find(variable.impl());
    if (found != averages_.end()) Tensor(variable).assign(found->second);
  }
}

std::vector<Tensor> Optimizer::clip_gradients(const std::vector<Tensor>& variables,
                                              const std::vector<Tensor>& gradients) const {
  if (!clips()) return gradients;
  std::vector<Tensor> clipped = gradients;
  if (clipvalue_ > 0) {
    for (Tensor& gradient : clipped) {
      if (!gradient.defined()) continue;
      Tensor low = Tensor::full({}, -clipvalue_, gradient.dtype(), gradient.device());
      Tensor high = Tensor::full({}, clipvalue_, gradient.dtype(), gradient.device());
      gradient = ops::minimum(ops::maximum(gradient, low), high);
    }
    return clipped;
  }
  // The squared norms, one per variable (of its local block), in the gradients' dtype as
  // Keras sums them, then added over the processes that hold other blocks.
  std::vector<Tensor> present_variables;
  std::vector<double> squared_norms;
  for (std::size_t i = 0; i < gradients.size(); ++i) {
    if (!gradients[i].defined()) continue;
    present_variables.push_back(variables[i]);
    squared_norms.push_back(ops::sum(ops::square(gradients[i])).item());
  }
  if (squared_norm_sum_) squared_norm_sum_(present_variables, squared_norms);
  auto scale_by = [](Tensor& gradient, double scale) {
    if (scale != 1.0) gradient = gradient * Tensor::full({}, scale, gradient.dtype(), gradient.device());
  };
  if (global_clipnorm_ > 0) {
    double total = 0.0;
    for (double value : squared_norms) total += value;
    const double norm = std::sqrt(total);
    // Keras' clip_by_global_norm: clip * min(1/norm, 1/clip), NaN where the norm is not finite.
    const double scale = global_clipnorm_ * std::min(1.0 / norm, 1.0 / global_clipnorm_) + (norm - norm);
    for (Tensor& gradient : clipped) {
      if (gradient.defined()) scale_by(gradient, scale);
    }
    return clipped;
  }
  std::size_t next = 0;
  for (Tensor& gradient : clipped) {
    if (!gradient.defined()) continue;
    // Keras' _clip_by_norm: values * clip / max(norm, clip); a zero gradient stays zero.
    const double norm = std::sqrt(squared_norms[next++]);
    scale_by(gradient, clipnorm_ / std::max(norm, clipnorm_));
  }
  return clipped;
}

Optimizer& Optimizer::set_clipnorm(double value) {
  set_clipping(value, "clipnorm", clipnorm_);
  return *this;
}

Optimizer& Optimizer::set_global_clipnorm(double value) {
  set_clipping(value, "global_clipnorm", global_clipnorm_);
  return *this;
}

Optimizer& Optimizer::set_clipvalue(double value) {
  set_clipping(value, "clipvalue", clipvalue_);
  return *this;
}

void Optimizer::set_clipping(double value, const char* what, double& field) {
  if (!std::isfinite(value) || value < 0) {
    throw ValueError(str(name_, ": ", what, " must be a finite number > 0 (or 0 for none), got ", value));
  }
  const double others = clipnorm_ + global_clipnorm_ + clipvalue_ - field;
  if (value > 0 && others > 0) {
    throw ValueError(str(name_, ": only one of clipnorm, clipvalue and global_clipnorm can be set; got ", what, "=",
                         value, " with clipnorm=", clipnorm_, ", clipvalue=", clipvalue_, ", global_clipnorm=",
                         global_clipnorm_));
  }
  field = value;
}

void Optimizer::apply_to_block(const Tensor& variable, std::int64_t offset, const Tensor& gradient_block) {
  if (offset < 0 || gradient_block.rank() != 1 || offset + gradient_block.size() > variable.size() ||
      gradient_block.dtype() != variable.dtype() || gradient_block.device() != variable.device()) {
    throw ShapeError(str(name_, ": a gradient block of shape ", shape_to_string(gradient_block.shape()), " (",
                         dtype_name(gradient_block.dtype()), ") at offset ", offset, " for variable '",
                         variable.name(), "' of ", variable.size(), " elements (",
                         dtype_name(variable.dtype()), "); expected a flat block inside it"));
  }
  if (needs_whole_variables()) {
    // A block's norm is not its variable's, and the sums and averages are kept per variable.
    throw ValueError(str(name_, ": apply_to_block updates a block of a variable, and this optimizer clips, ",
                         "accumulates gradients or keeps moving averages, which need whole variables; update whole ",
                         "variables with apply()"));
  }
  NoGradGuard no_grad;
  Tensor view = Tensor::view_of(variable, offset, {gradient_block.size()});
  block_ = Block{view.impl(), variable, offset, {}};
  try {
    update(view, gradient_block);
  } catch (...) {
    block_ = Block{};
    throw;
  }
  block_ = Block{};
}

std::size_t Optimizer::state_bytes() const {
  std::size_t total = 0;
  for (const auto& [variable, slots] : slots_) {
    for (const Tensor& slot : slots) total += slot.nbytes();
  }
  return total;
}

std::vector<Tensor> Optimizer::slots_of(const Tensor& variable) const {
  auto found = slots_.find(variable.impl());
  return found == slots_.end() ? std::vector<Tensor>{} : found->second;
}

void Optimizer::set_slots(const Tensor& variable, const std::vector<Tensor>& slots) {
  std::vector<Tensor> copies;
  for (const Tensor& slot : slots) {
    if (slot.shape() != variable.shape() || slot.dtype() != variable.dtype()) {
      throw ShapeError(str(name_, ": a state slot of shape ", shape_to_string(slot.shape()), " (",
                           dtype_name(slot.dtype()), ") for variable '", variable.name(),
                           "' of shape ", shape_to_string(variable.shape()), " (",
                           dtype_name(variable.dtype()), "); expected the variable's"));
    }
    Tensor copy = Tensor::zeros(variable.shape(), variable.dtype(), variable.device());
    copy.assign(slot.device() == variable.device() ? slot : slot.to(variable.device()));
    copies.push_back(copy);
  }
  slots_[variable.impl()] = std::move(copies);
}

Optimizer::OutsideSlots Optimizer::outside_slots_of(const Tensor& variable) const {
  OutsideSlots state;
  if (auto found = accumulated_.find(variable.impl()); found != accumulated_.end()) state.accumulated = found->second;
  if (auto found = averages_.find(variable.impl()); found != averages_.end()) state.average = found->second;
  return state;
}

void Optimizer::set_outside_slots(const Tensor& variable, const OutsideSlots& state) {
  auto copy_of = [&](const Tensor& given, const char* what) {
    if (given.shape() != variable.shape() || given.dtype() != variable.dtype()) {
      throw ShapeError(str(name_, ": ", what, " of shape ", shape_to_string(given.shape()), " (",
                           dtype_name(given.dtype()), ") for variable '", variable.name(), "' of shape ",
                           shape_to_string(variable.shape()), " (", dtype_name(variable.dtype()),
                           "); expected the variable's"));
    }
    Tensor copy = Tensor::zeros(variable.shape(), variable.dtype(), variable.device());
    copy.assign(given.device() == variable.device() ? given : given.to(variable.device()));
    return copy;
  };
  accumulated_.erase(variable.impl());
  averages_.erase(variable.impl());
  if (state.accumulated.defined()) accumulated_.emplace(variable.impl(), copy_of(state.accumulated, "a gradient sum"));
  if (state.average.defined()) averages_.emplace(variable.impl(), copy_of(state.average, "a moving average"));
}

void Optimizer::set_calls(std::int64_t value) {
  if (value < 0) throw ValueError(str(name_, ": the calls made must be >= 0, got ", value));
  calls_ = value;
}

void Optimizer::set_iterations(std::int64_t value) {
  if (value < 0) throw ValueError(str(name_, ": iterations must be >= 0, got ", value));
  calls_ = value * std::max(accumulation_steps_, 1);
}

Tensor& Optimizer::slot(const Tensor& variable, int index, double initial_value) {
  if (block_.view != nullptr && variable.impl() == block_.view) {
    while (static_cast<int>(block_.slot_views.size()) <= index) {
      Tensor whole = slot(block_.variable, static_cast<int>(block_.slot_views.size()), initial_value);
      block_.slot_views.push_back(Tensor::view_of(whole, block_.offset, variable.shape()));
    }
    return block_.slot_views[static_cast<std::size_t>(index)];
  }
  std::vector<Tensor>& slots = slots_[variable.impl()];
  while (static_cast<int>(slots.size()) <= index) {
    slots.push_back(initial_value == 0.0
                        ? Tensor::zeros(variable.shape(), variable.dtype(), variable.device())
                        : Tensor::full(variable.shape(), initial_value, variable.dtype(), variable.device()));
  }
  return slots[index];
}

SGD::SGD(LearningRate learning_rate, double momentum, bool nesterov, double weight_decay)
    : Optimizer(std::move(learning_rate), weight_decay, "SGD"), momentum_(momentum), nesterov_(nesterov) {
  check_range(momentum, 0.0, 1.0, "SGD momentum", false);
}

std::vector<std::vector<int>> SGD::keras_slot_order() const {
  if (momentum_ > 0) return {{0}};
  return {};
}

void SGD::update(Tensor& variable, const Tensor& gradient) {
  Tensor velocity = momentum_ > 0 ? slot(variable, 0) : Tensor();
  backend_for(variable.device())
      .sgd_update({step_learning_rate(), momentum_, nesterov_, weight_decay_}, variable, gradient,
                  velocity);
}

Adam::Adam(LearningRate learning_rate, double beta_1, double beta_2, double epsilon,
           double weight_decay)
    : Adam(std::move(learning_rate), beta_1, beta_2, epsilon, weight_decay, "Adam") {}

Adam::Adam(LearningRate learning_rate, double beta_1, double beta_2, double epsilon,
           double weight_decay, std::string name)
    : Optimizer(std::move(learning_rate), weight_decay, std::move(name)), beta_1_(beta_1), beta_2_(beta_2),
      epsilon_(epsilon) {
  check_range(beta_1, 0.0, 1.0, "beta_1", true);
  check_range(beta_2, 0.0, 1.0, "beta_2", true);
  if (!(epsilon > 0) || !std::isfinite(epsilon)) {
    throw ValueError(str("epsilon must be a finite number > 0, got ", epsilon));
  }
}

std::vector<std::vector<int>> Adam::keras_slot_order() const { return {{0, 1}}; }

void Adam::update(Tensor& variable, const Tensor& gradient) {
  // Handles, not references: creating the second slot may move the slot vector.
  Tensor second = slot(variable, 1);
  Tensor first = slot(variable, 0);
  backend_for(variable.device())
      .adam_update({step_learning_rate(), beta_1_, beta_2_, epsilon_, weight_decay_, iterations()},
                   variable, gradient, first, second);
}

AdamW::AdamW(LearningRate learning_rate, double weight_decay, double beta_1, double beta_2,
             double epsilon)
    : Adam(std::move(learning_rate), beta_1, beta_2, epsilon, weight_decay, "AdamW") {}

RMSprop::RMSprop(LearningRate learning_rate, double rho, double momentum, double epsilon, bool centered,
                 double weight_decay)
    : Optimizer(std::move(learning_rate), weight_decay, "RMSprop"), rho_(rho), momentum_(momentum),
      epsilon_(epsilon), centered_(centered) {
  check_range(rho, 0.0, 1.0, "RMSprop rho", false);
  check_range(momentum, 0.0, 1.0, "RMSprop momentum", false);
  if (!(epsilon > 0) || !std::isfinite(epsilon)) {
    throw ValueError(str("RMSprop epsilon must be a finite number > 0, got ", epsilon));
  }
}

std::vector<std::vector<int>> RMSprop::keras_slot_order() const {
  std::vector<std::vector<int>> order = {{0}};
  if (momentum_ > 0) order.push_back({1});
  if (centered_) order.push_back({2});
  return order;
}

void RMSprop::update(Tensor& variable, const Tensor& gradient) {
  // Slots: 0 velocity, 1 momentum, 2 average gradient; handles, as creating one may move the rest.
  Tensor average = centered_ ? slot(variable, 2) : Tensor();
  Tensor momentum = momentum_ > 0 ? slot(variable, 1) : Tensor();
  Tensor velocity = slot(variable, 0);
  backend_for(variable.device())
      .rmsprop_update({step_learning_rate(), rho_, momentum_, epsilon_, centered_, weight_decay_}, variable, gradient,
                      velocity, momentum, average);
}

Adagrad::Adagrad(LearningRate learning_rate, double initial_accumulator_value, double epsilon, double weight_decay)
    : Optimizer(std::move(learning_rate), weight_decay, "Adagrad"),
      initial_accumulator_value_(initial_accumulator_value), epsilon_(epsilon) {
  if (!std::isfinite(initial_accumulator_value) || initial_accumulator_value < 0) {
    throw ValueError(str("Adagrad initial_accumulator_value must be a finite number >= 0, got ",
                         initial_accumulator_value));
  }
  if (!(epsilon > 0) || !std::isfinite(epsilon)) {
    throw ValueError(str("Adagrad epsilon must be a finite number > 0, got ", epsilon));
  }
}

std::vector<std::vector<int>> Adagrad::keras_slot_order() const { return {{0}}; }

void Adagrad::update(Tensor& variable, const Tensor& gradient) {
  Tensor accumulator = slot(variable, 0, initial_accumulator_value_);
  backend_for(variable.device())
      .adagrad_update({step_learning_rate(), epsilon_, weight_decay_}, variable, gradient, accumulator);
}

std::shared_ptr<Optimizer> get(const std::string& name) {
  if (name == "sgd" || name == "SGD") return std::make_shared<SGD>();
  if (name == "adam" || name == "Adam") return std::make_shared<Adam>();
  if (name == "adamw" || name == "AdamW") return std::make_shared<AdamW>();
  if (name == "rmsprop" || name == "RMSprop") return std::make_shared<RMSprop>();
  if (name == "adagrad" || name == "Adagrad") return std::make_shared<Adagrad>();
  throw ValueError(str("unknown optimizer '", name, "'; expected one of sgd, adam, adamw, rmsprop, adagrad"));
}

}  // namespace keras::optimizers
