// bfloat16 products on the CPU's own bfloat16 instructions: oneDNN's bf16 matmul primitive
// (float32 accumulation, each result rounded once to bfloat16) where the CPU has AMX tiles or
// AVX512-BF16 dot products. oneDNN's bf16 matmul ran at 775 GFLOP/s on one core of the Xeon
// with AMX against 148 GFLOP/s for its float32 matmul (1024^3). Where the CPU has neither
// (AVX2 machines: Debian's oneDNN 2.6 creates no bf16 matmul there at all, and AVX-512 without
// BF16 would only emulate it), engine/cpu/matmul.cpp multiplies float32 copies instead, as
// XLA's CPU does. Found at run time, never assumed (docs/ARCHITECTURE.md, "Dtypes").
#pragma once
#include <cstdint>
#include <string>

#include "engine/half_precision.h"

namespace keras::cpu {

// True when the CPU multiplies bfloat16 natively and oneDNN offers a non-reference bf16 matmul
// for it, and KERAS_CPU_BFLOAT16_GEMM is not 0 (0 forces the float32 route: for measuring one
// against the other on the same machine). Decided once per process.
bool cpu_multiplies_bfloat16();

// What cpu_multiplies_bfloat16 decided and why, for benchmarks' and examples' headers
// ("bfloat16 GEMM: oneDNN brg:avx512_core_amx", "bfloat16 GEMM: none (the CPU has no AMX or
// AVX512-BF16); float32 copies").
std::string bfloat16_gemm_description();

// Whether oneDNN's bf16 matmul for this product shape is one of its fast implementations rather
// than its reference loop. Cached per shape and thread.
bool bfloat16_product_is_fast(std::int64_t m, std::int64_t n, std::int64_t k, bool transpose_a,
                              bool transpose_b);

// C[M,N] = op(A)[M,K] @ op(B)[K,N] in bfloat16, row-major with row strides lda, ldb, ldc (A is
// K x M when transposed, B is N x K). On the calling thread (its own primitives, no lock).
void multiply_bfloat16(const BFloat16* a, const BFloat16* b, BFloat16* c, std::int64_t m,
                       std::int64_t n, std::int64_t k, std::int64_t lda, std::int64_t ldb,
                       std::int64_t ldc, bool transpose_a, bool transpose_b);

}  // namespace keras::cpu
