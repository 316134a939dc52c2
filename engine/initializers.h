// Weight initializers with Keras' names, defaults and formulas. An initializer produces any
// block of the full tensor on its own (from the counter-based RNG), so a process holding one
// shard of a variable gets exactly the values that shard has in the single-device tensor.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "engine/random.h"
#include "engine/tensor.h"

namespace keras::initializers {

class Initializer {
 public:
  virtual ~Initializer() = default;
  // The block [starts, starts + block_shape) of the initial value of a `full_shape` tensor.
  virtual Tensor block(const Shape& full_shape, const Shape& starts, const Shape& block_shape,
                       DType dtype) const = 0;
  // The whole initial value.
  Tensor operator()(const Shape& shape, DType dtype = float32) const;
  virtual std::string name() const = 0;
};
using InitializerPtr = std::shared_ptr<const Initializer>;

// fan_in / fan_out as Keras computes them (kernel [..., in, out]; receptive field = the rest).
std::pair<double, double> compute_fans(const Shape& shape);

class Constant : public Initializer {
 public:
  explicit Constant(double value) : value_(value) {}
  Tensor block(const Shape&, const Shape&, const Shape& block_shape, DType dtype) const override;
  std::string name() const override { return "constant"; }
  double value() const { return value_; }

 private:
  double value_;
};

// Draws from the counter-based RNG. Without a seed, one is taken from the global seed stream
// at construction (keras::set_random_seed makes that reproducible).
class RandomInitializer : public Initializer {
 public:
  explicit RandomInitializer(std::optional<std::uint64_t> seed);
  std::uint64_t seed() const { return seed_; }

 protected:
  Tensor draw(RandomDistribution distribution, double a, double b, const Shape& full_shape,
              const Shape& starts, const Shape& block_shape, DType dtype) const;

 private:
  std::uint64_t seed_;
};

class RandomUniform : public RandomInitializer {
 public:
  explicit RandomUniform(double minval = -0.05, double maxval = 0.05,
                         std::optional<std::uint64_t> seed = std::nullopt);
  Tensor block(const Shape& full_shape, const Shape& starts, const Shape& block_shape,
               DType dtype) const override;
  std::string name() const override { return "random_uniform"; }
  double minval() const { return minval_; }
  double maxval() const { return maxval_; }

 private:
  double minval_, maxval_;
};

class RandomNormal : public RandomInitializer {
 public:
  explicit RandomNormal(double mean = 0.0, double stddev = 0.05,
                        std::optional<std::uint64_t> seed = std::nullopt);
  Tensor block(const Shape& full_shape, const Shape& starts, const Shape& block_shape,
               DType dtype) const override;
  std::string name() const override { return "random_normal"; }
  double mean() const { return mean_; }
  double stddev() const { return stddev_; }

 private:
  double mean_, stddev_;
};

// Keras' VarianceScaling: scale / n with n = fan_in, fan_out or their mean; the distribution
// is uniform, normal (untruncated) or truncated normal.
class VarianceScaling : public RandomInitializer {
 public:
  VarianceScaling(double scale, std::string mode, std::string distribution,
                  std::optional<std::uint64_t> seed = std::nullopt, std::string name = "variance_scaling");
  Tensor block(const Shape& full_shape, const Shape& starts, const Shape& block_shape,
               DType dtype) const override;
  std::string name() const override { return name_; }
  double scale() const { return scale_; }
  const std::string& mode() const { return mode_; }
  const std::string& distribution_kind() const { return distribution_; }

 private:
  double scale_;
  std::string mode_, distribution_, name_;
};

InitializerPtr zeros();
InitializerPtr ones();
InitializerPtr glorot_uniform(std::optional<std::uint64_t> seed = std::nullopt);
InitializerPtr glorot_normal(std::optional<std::uint64_t> seed = std::nullopt);
InitializerPtr he_normal(std::optional<std::uint64_t> seed = std::nullopt);
InitializerPtr he_uniform(std::optional<std::uint64_t> seed = std::nullopt);
// By Keras name: zeros, ones, glorot_uniform, glorot_normal, he_normal, he_uniform,
// random_normal, random_uniform (also "uniform" / "normal"); throws ValueError otherwise.
InitializerPtr get(const std::string& name);

}  // namespace keras::initializers
