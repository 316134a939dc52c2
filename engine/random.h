// Seeded, counter-based random numbers (Philox-4x32-10, Salmon et al., SC'11). Element i of a
// tensor is a pure function of (seed, i), so any slice of a tensor can be generated on its own
// with exactly the values it has in the full tensor: this is what lets a sharded variable equal
// the slice of its single-device initialisation, on any device, in any order.
#pragma once
#include <array>
#include <cstdint>

#include "engine/shape.h"

namespace keras {

enum class RandomDistribution { uniform, normal, truncated_normal };

struct RandomSpec {
  RandomDistribution distribution = RandomDistribution::uniform;
  double a = 0.0;  // uniform: minval;  normal / truncated_normal: mean
  double b = 1.0;  // uniform: maxval;  normal / truncated_normal: stddev
  std::uint64_t seed = 0;
};

// One Philox-4x32-10 block: four 32-bit words from a 128-bit counter and a 64-bit key.
std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> counter,
                                        std::array<std::uint32_t, 2> key);

// The value of element `index` (row-major index in the full tensor) under `spec`.
// Truncated normal redraws values beyond two standard deviations, as Keras does, using the
// counter's third word as the attempt number, so it stays a function of (seed, index).
double random_element(const RandomSpec& spec, std::uint64_t index);

// Process-wide seed generator, for layers and initializers created without an explicit seed.
// set_random_seed makes a whole program reproducible (keras.utils.set_random_seed).
void set_random_seed(std::uint64_t seed);
std::uint64_t next_random_seed();
// The generator's state, for checkpoints: set_random_seed(random_seed_state()) puts it back, so
// the seeds drawn after a restore are those an uninterrupted run would have drawn.
std::uint64_t random_seed_state();

}  // namespace keras
