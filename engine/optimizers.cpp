// Optimizer bookkeeping (iterations, slots, argument checks); the arithmetic is in the
// backends' fused update kernels.
#include "engine/optimizers.h"

#include <cmath>

#include "engine/backend.h"
#include "engine/errors.h"

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

double Optimizer::learning_rate() const { return schedule_ ? (*schedule_)(iterations_) : learning_rate_; }

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
    throw ValueError(str(name_, ": the learning rate schedule gave ", step_learning_rate_, " at step ", iterations_,
                         "; a rate must be a finite number >= 0"));
  }
  iterations_ += 1;
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < variables.size(); ++i) {
    if (!gradients[i].defined()) continue;
    Tensor variable = variables[i];
    if (gradients[i].shape() != variable.shape() || gradients[i].dtype() != variable.dtype()) {
      throw ShapeError(str(name_, ": gradient of shape ", shape_to_string(gradients[i].shape()),
                           " (", dtype_name(gradients[i].dtype()), ") for variable '",
                           variable.name(), "' of shape ", shape_to_string(variable.shape()),
                           " (", dtype_name(variable.dtype()), ")"));
    }
    update(variable, gradients[i].device() == variable.device()
                         ? gradients[i]
                         : gradients[i].to(variable.device()));
  }
}

void Optimizer::apply_to_block(const Tensor& variable, std::int64_t offset, const Tensor& gradient_block) {
  if (offset < 0 || gradient_block.rank() != 1 || offset + gradient_block.size() > variable.size() ||
      gradient_block.dtype() != variable.dtype() || gradient_block.device() != variable.device()) {
    throw ShapeError(str(name_, ": a gradient block of shape ", shape_to_string(gradient_block.shape()), " (",
                         dtype_name(gradient_block.dtype()), ") at offset ", offset, " for variable '",
                         variable.name(), "' of ", variable.size(), " elements (",
                         dtype_name(variable.dtype()), "); expected a flat block inside it"));
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

void Optimizer::set_iterations(std::int64_t value) {
  if (value < 0) throw ValueError(str(name_, ": iterations must be >= 0, got ", value));
  iterations_ = value;
}

Tensor& Optimizer::slot(const Tensor& variable, int index) {
  if (block_.view != nullptr && variable.impl() == block_.view) {
    while (static_cast<int>(block_.slot_views.size()) <= index) {
      Tensor whole = slot(block_.variable, static_cast<int>(block_.slot_views.size()));
      block_.slot_views.push_back(Tensor::view_of(whole, block_.offset, variable.shape()));
    }
    return block_.slot_views[static_cast<std::size_t>(index)];
  }
  std::vector<Tensor>& slots = slots_[variable.impl()];
  while (static_cast<int>(slots.size()) <= index) {
    slots.push_back(Tensor::zeros(variable.shape(), variable.dtype(), variable.device()));
  }
  return slots[index];
}

SGD::SGD(LearningRate learning_rate, double momentum, bool nesterov, double weight_decay)
    : Optimizer(std::move(learning_rate), weight_decay, "SGD"), momentum_(momentum), nesterov_(nesterov) {
  check_range(momentum, 0.0, 1.0, "SGD momentum", false);
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

std::shared_ptr<Optimizer> get(const std::string& name) {
  if (name == "sgd" || name == "SGD") return std::make_shared<SGD>();
  if (name == "adam" || name == "Adam") return std::make_shared<Adam>();
  if (name == "adamw" || name == "AdamW") return std::make_shared<AdamW>();
  throw ValueError(str("unknown optimizer '", name, "'; expected one of sgd, adam, adamw"));
}

}  // namespace keras::optimizers
