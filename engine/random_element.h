// One element of a seeded random tensor: Philox-4x32-10 (Salmon et al., SC'11) on the element's
// row-major index, then the distribution. Written once for the CPU (engine/cpu/random_fill.cpp)
// and the GPU (engine/cuda/random_fill.h), so both draw the same numbers for the same seed and
// index: uniform values are the same bits on both (integer arithmetic and one correctly rounded
// division); normal values go through log, sqrt and cos, where CUDA's double-precision log and
// cos may differ from glibc's in the last bit, which a float32 result only shows when it lands
// within that bit of a rounding boundary.
#pragma once
#include <cmath>
#include <cstdint>

#include "engine/host_device.h"

namespace keras {

enum class RandomDistribution { uniform, normal, truncated_normal };

struct RandomSpec {
  RandomDistribution distribution = RandomDistribution::uniform;
  double a = 0.0;  // uniform: minval;  normal / truncated_normal: mean
  double b = 1.0;  // uniform: maxval;  normal / truncated_normal: stddev
  std::uint64_t seed = 0;
};

struct PhiloxBlock {
  std::uint32_t word[4];
};

// One Philox-4x32-10 block: four 32-bit words from a 128-bit counter and a 64-bit key.
KERAS_HOST_DEVICE inline PhiloxBlock philox4x32(PhiloxBlock counter, std::uint32_t key0,
                                                std::uint32_t key1) {
  constexpr std::uint32_t kMultiplier0 = 0xD2511F53u;
  constexpr std::uint32_t kMultiplier1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u;
  constexpr std::uint32_t kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    std::uint64_t product0 = static_cast<std::uint64_t>(kMultiplier0) * counter.word[0];
    std::uint64_t product1 = static_cast<std::uint64_t>(kMultiplier1) * counter.word[2];
    auto high0 = static_cast<std::uint32_t>(product0 >> 32);
    auto low0 = static_cast<std::uint32_t>(product0);
    auto high1 = static_cast<std::uint32_t>(product1 >> 32);
    auto low1 = static_cast<std::uint32_t>(product1);
    counter = {{high1 ^ counter.word[1] ^ key0, low1, high0 ^ counter.word[3] ^ key1, low0}};
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return counter;
}

// Maps 32 random bits to a double in the open interval (0, 1); never 0, so log() is safe.
KERAS_HOST_DEVICE inline double unit_open(std::uint32_t bits) {
  return (static_cast<double>(bits) + 0.5) / 4294967296.0;
}

// The value of element `index` (row-major index in the full tensor) under `spec`.
// Truncated normal redraws values beyond two standard deviations, as Keras does, using the
// counter's third word as the attempt number, so it stays a function of (seed, index).
KERAS_HOST_DEVICE inline double random_element(const RandomSpec& spec, std::uint64_t index) {
  auto key0 = static_cast<std::uint32_t>(spec.seed);
  auto key1 = static_cast<std::uint32_t>(spec.seed >> 32);
  auto draw = [&](std::uint32_t attempt) {
    return philox4x32({{static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32),
                        attempt, 0u}},
                      key0, key1);
  };
  // Box-Muller on the first two words.
  auto standard_normal = [](const PhiloxBlock& bits) {
    constexpr double kTwoPi = 6.283185307179586476925286766559;
    double radius = std::sqrt(-2.0 * std::log(unit_open(bits.word[0])));
    return radius * std::cos(kTwoPi * unit_open(bits.word[1]));
  };
  switch (spec.distribution) {
    case RandomDistribution::uniform:
      return spec.a + (spec.b - spec.a) * unit_open(draw(0).word[0]);
    case RandomDistribution::normal:
      return spec.a + spec.b * standard_normal(draw(0));
    case RandomDistribution::truncated_normal:
      for (std::uint32_t attempt = 0;; ++attempt) {
        double value = standard_normal(draw(attempt));
        if (std::fabs(value) <= 2.0) return spec.a + spec.b * value;
      }
  }
  return 0.0;
}

}  // namespace keras
