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

#include "engine/cpu/instruction_rates.h"

namespace keras_benchmarks {

// One vector width's chains: `chains(n)` runs n rounds of `flops_per_round` FLOPs on the calling
// thread and returns a value that depends on all of them (so they cannot be optimised away).
// The chains are the engine's (engine/cpu/instruction_rates.h), which times them too.
struct FmaWidth {
  const char* name;  // "AVX2", "AVX-512"
  double flops_per_round;
  double (*chains)(std::int64_t rounds);
};

// The widths this CPU runs, narrowest first; empty where it has no x86 FMA (the roof is then 0
// and the benchmarks print no utilisation).
inline std::vector<FmaWidth> fma_widths() {
  std::vector<FmaWidth> widths;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    widths.push_back({"AVX2", keras::cpu::kFmaAvx2FlopsPerRound, keras::cpu::fma_chains_avx2});
  }
  if (__builtin_cpu_supports("avx512f")) {
    widths.push_back({"AVX-512", keras::cpu::kFmaAvx512FlopsPerRound, keras::cpu::fma_chains_avx512});
  }
#endif
  return widths;
}

}  // namespace keras_benchmarks
