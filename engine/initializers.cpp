// Initializers: Keras formulas on top of ops::random_slice.
#include "engine/initializers.h"

#include <cmath>

#include "engine/errors.h"
#include "engine/ops.h"

namespace keras::initializers {

Tensor Initializer::operator()(const Shape& shape, DType dtype) const {
  return block(shape, Shape(shape.size(), 0), shape, dtype);
}

std::pair<double, double> compute_fans(const Shape& shape) {
  if (shape.empty()) return {1.0, 1.0};
  if (shape.size() == 1) return {double(shape[0]), double(shape[0])};
  if (shape.size() == 2) return {double(shape[0]), double(shape[1])};
  double receptive_field = 1;
  for (std::size_t i = 0; i + 2 < shape.size(); ++i) receptive_field *= double(shape[i]);
  return {double(shape[shape.size() - 2]) * receptive_field,
          double(shape.back()) * receptive_field};
}

Tensor Constant::block(const Shape&, const Shape&, const Shape& block_shape, DType dtype) const {
  return Tensor::full(block_shape, value_, dtype);
}

RandomInitializer::RandomInitializer(std::optional<std::uint64_t> seed)
    : seed_(seed ? *seed : next_random_seed()) {}

Tensor RandomInitializer::draw(RandomDistribution distribution, double a, double b,
                               const Shape& full_shape, const Shape& starts,
                               const Shape& block_shape, DType dtype) const {
  return ops::random_slice({distribution, a, b, seed_}, full_shape, starts, block_shape, dtype);
}

RandomUniform::RandomUniform(double minval, double maxval, std::optional<std::uint64_t> seed)
    : RandomInitializer(seed), minval_(minval), maxval_(maxval) {
  if (!(minval <= maxval)) {
    throw ValueError(str("RandomUniform: minval ", minval, " must not exceed maxval ", maxval));
  }
}

Tensor RandomUniform::block(const Shape& full_shape, const Shape& starts,
                            const Shape& block_shape, DType dtype) const {
  return draw(RandomDistribution::uniform, minval_, maxval_, full_shape, starts, block_shape,
              dtype);
}

RandomNormal::RandomNormal(double mean, double stddev, std::optional<std::uint64_t> seed)
    : RandomInitializer(seed), mean_(mean), stddev_(stddev) {
  if (!(stddev >= 0)) throw ValueError(str("RandomNormal: stddev must be >= 0, got ", stddev));
}

Tensor RandomNormal::block(const Shape& full_shape, const Shape& starts,
                           const Shape& block_shape, DType dtype) const {
  return draw(RandomDistribution::normal, mean_, stddev_, full_shape, starts, block_shape, dtype);
}

VarianceScaling::VarianceScaling(double scale, std::string mode, std::string distribution,
                                 std::optional<std::uint64_t> seed, std::string name)
    : RandomInitializer(seed), scale_(scale), mode_(std::move(mode)),
      distribution_(std::move(distribution)), name_(std::move(name)) {
  if (!(scale > 0)) throw ValueError(str("VarianceScaling: scale must be > 0, got ", scale));
  if (mode_ != "fan_in" && mode_ != "fan_out" && mode_ != "fan_avg") {
    throw ValueError(str("VarianceScaling: mode '", mode_,
                         "' is not one of fan_in, fan_out, fan_avg"));
  }
  if (distribution_ != "uniform" && distribution_ != "truncated_normal" &&
      distribution_ != "untruncated_normal") {
    throw ValueError(str("VarianceScaling: distribution '", distribution_,
                         "' is not one of uniform, truncated_normal, untruncated_normal"));
  }
}

Tensor VarianceScaling::block(const Shape& full_shape, const Shape& starts,
                              const Shape& block_shape, DType dtype) const {
  auto [fan_in, fan_out] = compute_fans(full_shape);
  double n = mode_ == "fan_in" ? fan_in : mode_ == "fan_out" ? fan_out : (fan_in + fan_out) / 2;
  double variance = scale_ / std::max(1.0, n);
  if (distribution_ == "uniform") {
    double limit = std::sqrt(3.0 * variance);
    return draw(RandomDistribution::uniform, -limit, limit, full_shape, starts, block_shape,
                dtype);
  }
  if (distribution_ == "truncated_normal") {
    // Standard deviation of a unit normal truncated to [-2, 2], as in Keras.
    double stddev = std::sqrt(variance) / 0.87962566103423978;
    return draw(RandomDistribution::truncated_normal, 0.0, stddev, full_shape, starts,
                block_shape, dtype);
  }
  return draw(RandomDistribution::normal, 0.0, std::sqrt(variance), full_shape, starts,
              block_shape, dtype);
}

InitializerPtr zeros() { return std::make_shared<Constant>(0.0); }
InitializerPtr ones() { return std::make_shared<Constant>(1.0); }
InitializerPtr glorot_uniform(std::optional<std::uint64_t> seed) {
  return std::make_shared<VarianceScaling>(1.0, "fan_avg", "uniform", seed, "glorot_uniform");
}
InitializerPtr glorot_normal(std::optional<std::uint64_t> seed) {
  return std::make_shared<VarianceScaling>(1.0, "fan_avg", "truncated_normal", seed,
                                           "glorot_normal");
}
InitializerPtr he_normal(std::optional<std::uint64_t> seed) {
  return std::make_shared<VarianceScaling>(2.0, "fan_in", "truncated_normal", seed, "he_normal");
}
InitializerPtr he_uniform(std::optional<std::uint64_t> seed) {
  return std::make_shared<VarianceScaling>(2.0, "fan_in", "uniform", seed, "he_uniform");
}

InitializerPtr get(const std::string& name) {
  if (name == "zeros") return zeros();
  if (name == "ones") return ones();
  if (name == "glorot_uniform") return glorot_uniform();
  if (name == "glorot_normal") return glorot_normal();
  if (name == "he_normal") return he_normal();
  if (name == "he_uniform") return he_uniform();
  if (name == "random_normal" || name == "normal") return std::make_shared<RandomNormal>();
  if (name == "random_uniform" || name == "uniform") return std::make_shared<RandomUniform>();
  throw ValueError(str("unknown initializer '", name,
                       "'; expected one of zeros, ones, glorot_uniform, glorot_normal, "
                       "he_normal, he_uniform, random_normal, random_uniform"));
}

}  // namespace keras::initializers
