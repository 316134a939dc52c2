// Seeded, counter-based random numbers (Philox-4x32-10, Salmon et al., SC'11). Element i of a
// tensor is a pure function of (seed, i), so any slice of a tensor can be generated on its own
// with exactly the values it has in the full tensor: this is what lets a sharded variable equal
// the slice of its single-device initialisation, on any device, in any order.
#pragma once
#include <cstdint>

#include "engine/random_element.h"
#include "engine/shape.h"

namespace keras {

// Process-wide seed generator, for layers and initializers created without an explicit seed.
// set_random_seed makes a whole program reproducible (keras.utils.set_random_seed).
void set_random_seed(std::uint64_t seed);
std::uint64_t next_random_seed();
// The generator's state, for checkpoints: set_random_seed(random_seed_state()) puts it back, so
// the seeds drawn after a restore are those an uninterrupted run would have drawn.
std::uint64_t random_seed_state();

}  // namespace keras
