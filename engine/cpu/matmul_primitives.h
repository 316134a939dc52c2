// oneDNN's matmul primitive on row-major operands with row strides, either of them transposed,
// for the two products engine/cpu/matmul.cpp gives it rather than sgemm:
// - float32 A @ B^T: sgemm reached 86 GFLOP/s on one Zen 4 core for the MLP's input gradient
//   128x1024x1024 with B transposed, the primitive (its brgemm kernels) 96-98
//   (BM_TrainingStepProduct/4; 115 is the FMA roof); for the other transpositions sgemm was as
//   fast or faster (99 against 94 for A @ B), so only this case moves.
// - bfloat16, on the CPU's own bfloat16 instructions (AMX tiles or AVX512-BF16 dot products):
//   float32 accumulation, each result rounded once to bfloat16. oneDNN's bf16 matmul ran at
//   775 GFLOP/s on one core of the Xeon with AMX against 148 GFLOP/s for its float32 matmul
//   (1024^3). Where the CPU has neither (AVX2 machines: Debian's oneDNN 2.6 creates no bf16
//   matmul there at all, and AVX-512 without BF16 would only emulate it), matmul.cpp and
//   convolution.cpp compute on float32 copies instead, as XLA's CPU does. Found at run time,
//   never assumed (docs/ARCHITECTURE.md, "Dtypes").
// Each thread keeps its own primitives and scratchpad (no lock on the hot path), with OpenMP
// held to one thread before any is made (engine/cpu/onednn_threads.h).
#pragma once
#include <cstdint>
#include <string>

#include "engine/dtype.h"

namespace keras::cpu {

// True when the CPU multiplies bfloat16 natively and oneDNN offers a non-reference bf16 matmul
// for it, and KERAS_CPU_BFLOAT16_GEMM is not 0 (0 forces the float32 route: for measuring one
// against the other on the same machine). Decided once per process.
bool cpu_multiplies_bfloat16();

// What cpu_multiplies_bfloat16 decided and why, for tests' and benchmarks' output ("oneDNN
// brg:avx512_core_amx", "none (the CPU has no AMX or AVX512-BF16); float32 copies").
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
