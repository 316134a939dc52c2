// Timed chains of the CPU's multiply-add instructions: how fast this core multiplies, measured
// rather than read off its feature flags. Two places need it: the engine's choice of route for
// bfloat16 products (engine/cpu/matmul_primitives.cpp) and the benchmarks' roofs
// (benchmarks/fma_roof.h), so the chains live here once.
//
// Why measured: a feature flag says an instruction exists, not that it is fast. On the 2-core
// Xeon VM of 2026-12-07 (AVX-512 and AVX512-BF16, AMX hidden by the hypervisor) the bf16 dot
// product (vdpbf16ps, 32 multiply-adds) ran at 87 GFLOP/s on one core against 176 for 16-wide
// float32 FMAs: half the float32 rate, and oneDNN's bf16 GEMM on it 81 GFLOP/s against 161 for
// its float32 GEMM. Routing mixed_bfloat16's products there by the flag made the transformer
// step 1.24x and the convnet step 1.33x float32's time.
#pragma once
#include <cstdint>

namespace keras::cpu {

// Independent chains per round: enough to cover a 4-cycle latency on two pipes.
inline constexpr int kMultiplyAddChains = 12;

// Each runs `rounds` rounds of kMultiplyAddChains instructions on the calling thread and returns
// a value that depends on all of them (so they cannot be optimised away). Call one only where
// the CPU has its instructions (__builtin_cpu_supports "avx2" and "fma", "avx512f",
// "avx512bf16"); the FLOPs of one round are beside each.
double fma_chains_avx2(std::int64_t rounds);
inline constexpr double kFmaAvx2FlopsPerRound = 2.0 * 8 * kMultiplyAddChains;
double fma_chains_avx512(std::int64_t rounds);
inline constexpr double kFmaAvx512FlopsPerRound = 2.0 * 16 * kMultiplyAddChains;
double bfloat16_dot_chains_avx512(std::int64_t rounds);  // vdpbf16ps: 16 lanes x 2 products
inline constexpr double kBfloat16DotFlopsPerRound = 2.0 * 32 * kMultiplyAddChains;

// The rate of AVX512-BF16 dot products over the rate of 16-wide float32 FMAs on the calling
// thread's core: short chains of each, interleaved, the fastest of several tries of each (so a
// neighbour's load or a clock change hits both alike); about a millisecond. 0 where the CPU
// lacks AVX512-BF16.
double bfloat16_dot_rate_over_float32_fma_rate();

}  // namespace keras::cpu
