// The FMA roof, shared by the benchmarks that report a FLOP rate against it (matmul_benchmark,
// transformer_step): fma_chains(n) runs n rounds of twelve independent chains of 8-wide fused
// multiply-adds (2 * 8 * 12 * n FLOPs) on the calling thread.
#pragma once
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>

namespace keras_benchmarks {

// The FMA roof: twelve independent chains of 8-wide fused multiply-adds per thread, enough to
// cover the FMA latency on two pipes (Zen 4 and Skylake-X: 4 cycles, 2 pipes). Zen 4 runs
// 16-wide AVX-512 FMAs at the same FLOP rate (measured: 115 GFLOP/s a core for both here),
// so the 8-wide form is the roof for oneDNN's AVX-512 kernels too.
__attribute__((target("avx2,fma"))) inline double fma_chains(std::int64_t iterations) {
  constexpr int kChains = 12;
  __m256 accumulators[kChains];
  for (int i = 0; i < kChains; ++i) accumulators[i] = _mm256_set1_ps(0.001f * static_cast<float>(i));
  const __m256 scale = _mm256_set1_ps(0.9999f);
  const __m256 shift = _mm256_set1_ps(0.0001f);
  for (std::int64_t step = 0; step < iterations; ++step) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) accumulators[i] = _mm256_fmadd_ps(accumulators[i], scale, shift);
  }
  __m256 sum = accumulators[0];
  for (int i = 1; i < kChains; ++i) sum = _mm256_add_ps(sum, accumulators[i]);
  float lanes[8];
  _mm256_storeu_ps(lanes, sum);
  return static_cast<double>(lanes[0]);
}

inline constexpr double kFmaChainFlops = 2.0 * 8 * 12;  // per round

}  // namespace keras_benchmarks
#endif
