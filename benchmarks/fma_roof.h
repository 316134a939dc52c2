// The float32 FMA roof, shared by the benchmarks that report a FLOP rate against it
// (matmul_benchmark, and through step_timing.h the step benchmarks): chains of fused
// multiply-adds at every vector width the CPU has, found at run time (AVX2 and, where the CPU
// has it, AVX-512). The roof is the fastest of them, named, so an MFU says what it is against.
//
// Why every width and not a fixed one: on Zen 4 a 16-wide AVX-512 FMA runs as two 8-wide halves
// (115 GFLOP/s a core for both, measured), but a Xeon with two 512-bit FMA units does twice the
// 8-wide rate, and oneDNN's AVX-512 kernels run there. The 8-wide roof alone made the MLP step
// print 105% "MFU" on such a Xeon (52-56% against its AVX-512 roof).
#pragma once
#include <cstdint>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace keras_benchmarks {

// One vector width's chains: `chains(n)` runs n rounds of `flops_per_round` FLOPs on the calling
// thread and returns a value that depends on all of them (so they cannot be optimised away).
struct FmaWidth {
  const char* name;  // "AVX2", "AVX-512"
  double flops_per_round;
  double (*chains)(std::int64_t rounds);
};

#if defined(__x86_64__)
// Twelve independent chains: enough to cover the FMA latency on two pipes (Zen 4 and
// Skylake-X: 4 cycles, 2 pipes).
inline constexpr int kFmaChains = 12;

__attribute__((target("avx2,fma"))) inline double fma_chains_avx2(std::int64_t rounds) {
  __m256 accumulators[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) accumulators[i] = _mm256_set1_ps(0.001f * static_cast<float>(i));
  const __m256 scale = _mm256_set1_ps(0.9999f);
  const __m256 shift = _mm256_set1_ps(0.0001f);
  for (std::int64_t round = 0; round < rounds; ++round) {
#pragma GCC unroll 12
    for (int i = 0; i < kFmaChains; ++i) accumulators[i] = _mm256_fmadd_ps(accumulators[i], scale, shift);
  }
  __m256 sum = accumulators[0];
  for (int i = 1; i < kFmaChains; ++i) sum = _mm256_add_ps(sum, accumulators[i]);
  float lanes[8];
  _mm256_storeu_ps(lanes, sum);
  return static_cast<double>(lanes[0]);
}

__attribute__((target("avx512f"))) inline double fma_chains_avx512(std::int64_t rounds) {
  __m512 accumulators[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) accumulators[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 scale = _mm512_set1_ps(0.9999f);
  const __m512 shift = _mm512_set1_ps(0.0001f);
  for (std::int64_t round = 0; round < rounds; ++round) {
#pragma GCC unroll 12
    for (int i = 0; i < kFmaChains; ++i) accumulators[i] = _mm512_fmadd_ps(accumulators[i], scale, shift);
  }
  __m512 sum = accumulators[0];
  for (int i = 1; i < kFmaChains; ++i) sum = _mm512_add_ps(sum, accumulators[i]);
  // Stored and added here: GCC 12's _mm512_reduce_add_ps trips its own -Wuninitialized.
  float lanes[16];
  _mm512_storeu_ps(lanes, sum);
  return static_cast<double>(lanes[0]);
}
#endif

// The widths this CPU runs, narrowest first; empty where it has no x86 FMA (the roof is then 0
// and the benchmarks print no utilisation).
inline std::vector<FmaWidth> fma_widths() {
  std::vector<FmaWidth> widths;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    widths.push_back({"AVX2", 2.0 * 8 * kFmaChains, fma_chains_avx2});
  }
  if (__builtin_cpu_supports("avx512f")) widths.push_back({"AVX-512", 2.0 * 16 * kFmaChains, fma_chains_avx512});
#endif
  return widths;
}

}  // namespace keras_benchmarks
