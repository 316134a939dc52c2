// oneDNN's matmul primitive on row-major operands with row strides, either of them transposed,
// for the two products engine/cpu/matmul.cpp gives it rather than sgemm:
// - float32 A @ B^T: sgemm reached 86 GFLOP/s on one Zen 4 core for the MLP's input gradient
//   128x1024x1024 with B transposed, the primitive (its brgemm kernels) 96-98
//   (BM_TrainingStepProduct/4; 115 is the FMA roof); for the other transpositions sgemm was as
//   fast or faster (99 against 94 for A @ B), so only this case moves.
// - bfloat16, on the CPU's own bfloat16 instructions (AMX tiles or AVX512-BF16 dot products):
//   float32 accumulation, each result rounded once to bfloat16. oneDNN's bf16 matmul ran at
//   775 GFLOP/s on one core of the Xeon with AMX against 148 GFLOP/s for its float32 matmul
//   (1024^3). AVX512-BF16 without AMX is taken only where its dot products are measured to be
//   fast (instruction_rates.h): on a Xeon VM with AMX hidden they ran at half the float32 FMA
//   rate. Where the CPU has neither, or they are slow (AVX2 machines: Debian's oneDNN 2.6
//   creates no bf16 matmul there at all), matmul.cpp and convolution.cpp compute on float32
//   copies instead, as XLA's CPU does. Found at run time, never assumed (docs/ARCHITECTURE.md,
//   "Dtypes").
// Each thread keeps its own primitives and scratchpad (no lock on the hot path), with OpenMP
// held to one thread before any is made (engine/cpu/onednn_threads.h).
#pragma once
#include <cstdint>
#include <string>

#include "engine/dtype.h"

namespace keras::cpu {

// True when bfloat16 products run on oneDNN's bf16 kernels: the CPU multiplies bfloat16 in
// hardware, oneDNN offers a non-reference bf16 matmul for it, and either the CPU has AMX or its
// AVX512-BF16 dot products measure at least 1.5x its float32 FMA rate. KERAS_CPU_BFLOAT16_GEMM
// overrides the choice: 0 forces float32 copies, 1 the bf16 kernels wherever oneDNN has them
// (to measure one route against the other, or test the kernels, on the same machine). Decided
// once per process.
bool cpu_multiplies_bfloat16();

// Whether oneDNN's effective ISA here includes AMX: the CPU has it and the kernel lets this
// process use its tile registers (oneDNN asks for them). What cpu_multiplies_bfloat16 takes
// without measuring.
bool onednn_finds_amx();

// What cpu_multiplies_bfloat16 decided and why, for tests' and benchmarks' output ("oneDNN
// brg:avx512_core_amx", "none (AVX512-BF16 dot products measured at 0.49x the float32 FMA
// rate, ...); float32 copies").
std::string bfloat16_gemm_description();

// C[m,n] = op(A)[m,k] @ op(B)[k,n]; A is stored k x m when transposed, B n x k; lda, ldb, ldc
// are the row strides (elements) of A, B and C as stored.
struct ProductLayout {
  std::int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  bool transpose_a = false, transpose_b = false;
};

// Whether oneDNN's matmul for this dtype (float32 or bfloat16) and layout is one of its fast
// implementations rather than its reference loop. Cached per layout and thread.
bool matmul_primitive_is_fast(DType dtype, const ProductLayout& layout);

// C = op(A) @ op(B) on the calling thread's primitive for this dtype and layout.
void run_matmul_primitive(DType dtype, const void* a, const void* b, void* c, const ProductLayout& layout);

}  // namespace keras::cpu
