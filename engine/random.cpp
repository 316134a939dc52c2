// The process-wide seed generator (the elements themselves: engine/random_element.h).
#include "engine/random.h"

#include <atomic>

namespace keras {
namespace {

std::atomic<std::uint64_t> global_seed_counter{0x5EED5EED12345678ull};

}  // namespace

void set_random_seed(std::uint64_t seed) { global_seed_counter.store(seed); }

std::uint64_t random_seed_state() { return global_seed_counter.load(); }

std::uint64_t next_random_seed() {
  // SplitMix64 over a counter: consecutive calls give well-separated Philox keys.
  std::uint64_t value = global_seed_counter.fetch_add(0x9E3779B97F4A7C15ull);
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

}  // namespace keras
