// The schedules' formulas, as Keras 3 writes them (keras/src/optimizers/schedules).
#include "engine/learning_rate_schedules.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/errors.h"

namespace keras::optimizers::schedules {
namespace {
void check_positive_steps(std::int64_t steps, const char* schedule, const char* what) {
  if (steps <= 0) throw ValueError(str(schedule, ": ", what, " must be a positive number of steps, got ", steps));
}
void check_finite(double value, const char* schedule, const char* what) {
  if (!std::isfinite(value)) throw ValueError(str(schedule, ": ", what, " must be finite, got ", value));
}
void check_step(std::int64_t step, const char* schedule) {
  if (step < 0) throw ValueError(str(schedule, ": step must be >= 0, got ", step));
}
}  // namespace

ExponentialDecay::ExponentialDecay(double initial_learning_rate, std::int64_t decay_steps, double decay_rate,
                                   bool staircase)
    : initial_(initial_learning_rate), decay_rate_(decay_rate), decay_steps_(decay_steps), staircase_(staircase) {
  check_finite(initial_, "ExponentialDecay", "initial_learning_rate");
  check_finite(decay_rate_, "ExponentialDecay", "decay_rate");
  check_positive_steps(decay_steps_, "ExponentialDecay", "decay_steps");
}

double ExponentialDecay::operator()(std::int64_t step) const {
  check_step(step, "ExponentialDecay");
  double exponent = double(step) / double(decay_steps_);
  if (staircase_) exponent = std::floor(exponent);
  return initial_ * std::pow(decay_rate_, exponent);
}

PiecewiseConstantDecay::PiecewiseConstantDecay(std::vector<std::int64_t> boundaries, std::vector<double> values)
    : boundaries_(std::move(boundaries)), values_(std::move(values)) {
  if (values_.size() != boundaries_.size() + 1) {
    throw ValueError(str("PiecewiseConstantDecay: ", boundaries_.size(), " boundaries need ", boundaries_.size() + 1,
                         " values, got ", values_.size()));
  }
  for (std::size_t i = 1; i < boundaries_.size(); ++i) {
    if (boundaries_[i] <= boundaries_[i - 1]) {
      throw ValueError(str("PiecewiseConstantDecay: boundaries must increase, got ", boundaries_[i - 1], " then ",
                           boundaries_[i]));
    }
  }
  for (double value : values_) check_finite(value, "PiecewiseConstantDecay", "each value");
}

double PiecewiseConstantDecay::operator()(std::int64_t step) const {
  check_step(step, "PiecewiseConstantDecay");
  for (std::size_t i = 0; i < boundaries_.size(); ++i) {
    if (step <= boundaries_[i]) return values_[i];
  }
  return values_.back();
}

PolynomialDecay::PolynomialDecay(double initial_learning_rate, std::int64_t decay_steps, double end_learning_rate,
                                 double power, bool cycle)
    : initial_(initial_learning_rate), end_(end_learning_rate), power_(power), decay_steps_(decay_steps),
      cycle_(cycle) {
  check_finite(initial_, "PolynomialDecay", "initial_learning_rate");
  check_finite(end_, "PolynomialDecay", "end_learning_rate");
  check_finite(power_, "PolynomialDecay", "power");
  check_positive_steps(decay_steps_, "PolynomialDecay", "decay_steps");
}

double PolynomialDecay::operator()(std::int64_t step) const {
  check_step(step, "PolynomialDecay");
  double steps = double(decay_steps_);
  double position = double(step);
  if (cycle_) {
    // The first cycle covers step 0 too (Keras: a multiplier of 1 at step 0).
    double multiplier = step == 0 ? 1.0 : std::ceil(position / steps);
    steps *= multiplier;
  } else {
    position = std::min(position, steps);
  }
  return (initial_ - end_) * std::pow(1.0 - position / steps, power_) + end_;
}

InverseTimeDecay::InverseTimeDecay(double initial_learning_rate, std::int64_t decay_steps, double decay_rate,
                                   bool staircase)
    : initial_(initial_learning_rate), decay_rate_(decay_rate), decay_steps_(decay_steps), staircase_(staircase) {
  check_finite(initial_, "InverseTimeDecay", "initial_learning_rate");
  check_finite(decay_rate_, "InverseTimeDecay", "decay_rate");
  check_positive_steps(decay_steps_, "InverseTimeDecay", "decay_steps");
}

double InverseTimeDecay::operator()(std::int64_t step) const {
  check_step(step, "InverseTimeDecay");
  double ratio = double(step) / double(decay_steps_);
  if (staircase_) ratio = std::floor(ratio);
  return initial_ / (1.0 + decay_rate_ * ratio);
}

CosineDecay::CosineDecay(double initial_learning_rate, std::int64_t decay_steps, double alpha,
                         std::optional<double> warmup_target, std::int64_t warmup_steps)
    : initial_(initial_learning_rate), alpha_(alpha), decay_steps_(decay_steps), warmup_target_(warmup_target),
      warmup_steps_(warmup_steps) {
  check_finite(initial_, "CosineDecay", "initial_learning_rate");
  check_finite(alpha_, "CosineDecay", "alpha");
  check_positive_steps(decay_steps_, "CosineDecay", "decay_steps");
  if (warmup_steps_ < 0) throw ValueError(str("CosineDecay: warmup_steps must be >= 0, got ", warmup_steps_));
  if (warmup_target_) check_finite(*warmup_target_, "CosineDecay", "warmup_target");
}

double CosineDecay::operator()(std::int64_t step) const {
  check_step(step, "CosineDecay");
  auto decayed = [&](double position, double from) {
    double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * position / double(decay_steps_)));
    return from * ((1.0 - alpha_) * cosine + alpha_);
  };
  if (!warmup_target_) return decayed(std::min(double(step), double(decay_steps_)), initial_);
  double position = std::min(double(step), double(decay_steps_ + warmup_steps_));
  if (position < double(warmup_steps_)) {
    return (*warmup_target_ - initial_) * (position / double(warmup_steps_)) + initial_;
  }
  return decayed(position - double(warmup_steps_), *warmup_target_);
}

}  // namespace keras::optimizers::schedules
