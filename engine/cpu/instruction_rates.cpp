// Timed multiply-add chains (see instruction_rates.h). Each chain function is compiled for its
// own instruction set (a target attribute) while the rest of the engine stays x86-64-v3, and is
// only called after the CPU says it has that set.
#include "engine/cpu/instruction_rates.h"

#include <algorithm>
#include <chrono>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace keras::cpu {

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) double fma_chains_avx2(std::int64_t rounds) {
  __m256 accumulators[kMultiplyAddChains];
  for (int i = 0; i < kMultiplyAddChains; ++i) accumulators[i] = _mm256_set1_ps(0.001f * static_cast<float>(i));
  const __m256 scale = _mm256_set1_ps(0.9999f);
  const __m256 shift = _mm256_set1_ps(0.0001f);
  for (std::int64_t round = 0; round < rounds; ++round) {
#pragma GCC unroll 12
    for (int i = 0; i < kMultiplyAddChains; ++i) accumulators[i] = _mm256_fmadd_ps(accumulators[i], scale, shift);
  }
  __m256 sum = accumulators[0];
  for (int i = 1; i < kMultiplyAddChains; ++i) sum = _mm256_add_ps(sum, accumulators[i]);
  float lanes[8];
  _mm256_storeu_ps(lanes, sum);
  return static_cast<double>(lanes[0]);
}

__attribute__((target("avx512f"))) double fma_chains_avx512(std::int64_t rounds) {
  __m512 accumulators[kMultiplyAddChains];
  for (int i = 0; i < kMultiplyAddChains; ++i) accumulators[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 scale = _mm512_set1_ps(0.9999f);
  const __m512 shift = _mm512_set1_ps(0.0001f);
  for (std::int64_t round = 0; round < rounds; ++round) {
#pragma GCC unroll 12
    for (int i = 0; i < kMultiplyAddChains; ++i) accumulators[i] = _mm512_fmadd_ps(accumulators[i], scale, shift);
  }
  __m512 sum = accumulators[0];
  for (int i = 1; i < kMultiplyAddChains; ++i) sum = _mm512_add_ps(sum, accumulators[i]);
  // Stored and added here: GCC 12's _mm512_reduce_add_ps trips its own -Wuninitialized.
  float lanes[16];
  _mm512_storeu_ps(lanes, sum);
  return static_cast<double>(lanes[0]);
}

__attribute__((target("avx512f,avx512bf16"))) double bfloat16_dot_chains_avx512(std::int64_t rounds) {
  __m512 accumulators[kMultiplyAddChains];
  for (int i = 0; i < kMultiplyAddChains; ++i) accumulators[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  // 1.0 and 0.99609375 as bfloat16 bit patterns: the sums grow slowly and stay finite.
  const __m512bh left = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f80));
  const __m512bh right = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f7f));
  for (std::int64_t round = 0; round < rounds; ++round) {
#pragma GCC unroll 12
    for (int i = 0; i < kMultiplyAddChains; ++i) accumulators[i] = _mm512_dpbf16_ps(accumulators[i], left, right);
  }
  __m512 sum = accumulators[0];
  for (int i = 1; i < kMultiplyAddChains; ++i) sum = _mm512_add_ps(sum, accumulators[i]);
  float lanes[16];
  _mm512_storeu_ps(lanes, sum);
  return static_cast<double>(lanes[0]);
}
#else
double fma_chains_avx2(std::int64_t) { return 0; }
double fma_chains_avx512(std::int64_t) { return 0; }
double bfloat16_dot_chains_avx512(std::int64_t) { return 0; }
#endif

double bfloat16_dot_rate_over_float32_fma_rate() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16")) return 0;
  // 2048 rounds: 25k FMAs, about 5 us at two a cycle; the dot products 1-4x that. Seven
  // interleaved tries each, after an untimed warm-up of both: a core runs its first 512-bit
  // instructions slowly for some microseconds (without the warm-up the first timed pair read
  // 0.55x against 0.50x for the rest on the Xeon VM).
  constexpr std::int64_t kRounds = 2048;
  constexpr int kTries = 7;
  double fastest_fma = std::numeric_limits<double>::infinity();
  double fastest_dot = std::numeric_limits<double>::infinity();
  volatile double sink = 0;
  // The chains have no side effects, so the compiler may move a call across the clock reads;
  // the empty asm statements pin it between them (without them GCC 12 timed nothing and the
  // ratio read 2.0).
  const auto seconds_of = [&](double (*chains)(std::int64_t)) {
    const auto begin = std::chrono::steady_clock::now();
    std::int64_t rounds = kRounds;
    asm volatile("" : "+r"(rounds) : : "memory");
    double value = chains(rounds);
    asm volatile("" : "+x"(value) : : "memory");
    const auto end = std::chrono::steady_clock::now();
    sink = sink + value;
    return std::chrono::duration<double>(end - begin).count();
  };
  sink = sink + fma_chains_avx512(8 * kRounds) + bfloat16_dot_chains_avx512(kRounds);
  for (int attempt = 0; attempt < kTries; ++attempt) {
    fastest_fma = std::min(fastest_fma, seconds_of(fma_chains_avx512));
    fastest_dot = std::min(fastest_dot, seconds_of(bfloat16_dot_chains_avx512));
  }
  const double fma_rate = kFmaAvx512FlopsPerRound / fastest_fma;
  const double dot_rate = kBfloat16DotFlopsPerRound / fastest_dot;
  return dot_rate / fma_rate;
#else
  return 0;
#endif
}

}  // namespace keras::cpu
