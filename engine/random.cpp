// Philox-4x32-10 and the distributions built on it.
#include "engine/random.h"

#include <atomic>
#include <cmath>
#include <numbers>

namespace keras {
namespace {

constexpr std::uint32_t kMultiplier0 = 0xD2511F53u;
constexpr std::uint32_t kMultiplier1 = 0xCD9E8D57u;
constexpr std::uint32_t kWeyl0 = 0x9E3779B9u;
constexpr std::uint32_t kWeyl1 = 0xBB67AE85u;

// Maps 32 random bits to a float in the open interval (0, 1); never 0, so log() is safe.
double unit_open(std::uint32_t bits) { return (static_cast<double>(bits) + 0.5) / 4294967296.0; }

std::atomic<std::uint64_t> global_seed_counter{0x5EED5EED12345678ull};

}  // namespace

std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> counter,
                                        std::array<std::uint32_t, 2> key) {
  for (int round = 0; round < 10; ++round) {
    std::uint64_t product0 = static_cast<std::uint64_t>(kMultiplier0) * counter[0];
    std::uint64_t product1 = static_cast<std::uint64_t>(kMultiplier1) * counter[2];
    std::uint32_t high0 = static_cast<std::uint32_t>(product0 >> 32);
    std::uint32_t low0 = static_cast<std::uint32_t>(product0);
    std::uint32_t high1 = static_cast<std::uint32_t>(product1 >> 32);
    std::uint32_t low1 = static_cast<std::uint32_t>(product1);
    counter = {high1 ^ counter[1] ^ key[0], low1, high0 ^ counter[3] ^ key[1], low0};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return counter;
}

double random_element(const RandomSpec& spec, std::uint64_t index) {
  std::array<std::uint32_t, 2> key = {static_cast<std::uint32_t>(spec.seed),
                                      static_cast<std::uint32_t>(spec.seed >> 32)};
  auto draw = [&](std::uint32_t attempt) {
    return philox4x32({static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32),
                       attempt, 0u},
                      key);
  };
  auto standard_normal = [](const std::array<std::uint32_t, 4>& bits) {
    // Box-Muller on the first two words.
    double radius = std::sqrt(-2.0 * std::log(unit_open(bits[0])));
    return radius * std::cos(2.0 * std::numbers::pi * unit_open(bits[1]));
  };
  switch (spec.distribution) {
    case RandomDistribution::uniform:
      return spec.a + (spec.b - spec.a) * unit_open(draw(0)[0]);
    case RandomDistribution::normal:
      return spec.a + spec.b * standard_normal(draw(0));
    case RandomDistribution::truncated_normal:
      for (std::uint32_t attempt = 0;; ++attempt) {
        double value = standard_normal(draw(attempt));
        if (std::abs(value) <= 2.0) return spec.a + spec.b * value;
      }
  }
  return 0.0;
}

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
