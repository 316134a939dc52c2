// keras.optimizers.schedules: the learning rate as a function of the optimizer's step count,
// with Keras 3's formulas and defaults. An optimizer given a schedule (optimizers.h's
// LearningRate) evaluates it at its step count before each update, as Keras' optimizers do
// (the first update uses schedule(0)). Subclass LearningRateSchedule for your own.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace keras::optimizers::schedules {

class LearningRateSchedule {
 public:
  virtual ~LearningRateSchedule() = default;
  // The learning rate for the update made at `step` (0 for the first).
  virtual double operator()(std::int64_t step) const = 0;
};
using SchedulePtr = std::shared_ptr<const LearningRateSchedule>;

// initial * decay_rate ^ (step / decay_steps), the exponent floored with staircase.
class ExponentialDecay : public LearningRateSchedule {
 public:
  ExponentialDecay(double initial_learning_rate, std::int64_t decay_steps, double decay_rate, bool staircase = false);
  double operator()(std::int64_t step) const override;

 private:
  double initial_, decay_rate_;
  std::int64_t decay_steps_;
  bool staircase_;
};

// values[0] up to and including boundaries[0], values[i] for boundaries[i-1] < step <=
// boundaries[i], values.back() after the last boundary; one more value than boundaries.
class PiecewiseConstantDecay : public LearningRateSchedule {
 public:
  PiecewiseConstantDecay(std::vector<std::int64_t> boundaries, std::vector<double> values);
  double operator()(std::int64_t step) const override;

 private:
  std::vector<std::int64_t> boundaries_;
  std::vector<double> values_;
};

// From initial to end_learning_rate over decay_steps along (1 - step / decay_steps) ^ power;
// with cycle the decay restarts, over the next multiple of decay_steps, when it ends.
class PolynomialDecay : public LearningRateSchedule {
 public:
  PolynomialDecay(double initial_learning_rate, std::int64_t decay_steps, double end_learning_rate = 0.0001,
                  double power = 1.0, bool cycle = false);
  double operator()(std::int64_t step) const override;

 private:
  double initial_, end_, power_;
  std::int64_t decay_steps_;
  bool cycle_;
};

// initial / (1 + decay_rate * step / decay_steps), the ratio floored with staircase.
class InverseTimeDecay : public LearningRateSchedule {
 public:
  InverseTimeDecay(double initial_learning_rate, std::int64_t decay_steps, double decay_rate, bool staircase = false);
  double operator()(std::int64_t step) const override;

 private:
  double initial_, decay_rate_;
  std::int64_t decay_steps_;
  bool staircase_;
};

// Cosine decay from the initial rate (or, with a warmup, from warmup_target after a linear
// warmup of warmup_steps from the initial rate) down to alpha times it over decay_steps, then
// constant (SGDR without restarts, as Keras 3's CosineDecay).
class CosineDecay : public LearningRateSchedule {
 public:
  CosineDecay(double initial_learning_rate, std::int64_t decay_steps, double alpha = 0.0,
              std::optional<double> warmup_target = std::nullopt, std::int64_t warmup_steps = 0);
  double operator()(std::int64_t step) const override;

 private:
  double initial_, alpha_;
  std::int64_t decay_steps_;
  std::optional<double> warmup_target_;
  std::int64_t warmup_steps_;
};

}  // namespace keras::optimizers::schedules
