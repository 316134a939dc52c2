// GPU matmul: row-major products mapped onto one column-major GEMM call (cuBLAS' convention).
// A row-major C[M,N] read column-major is C^T[N,M], and C^T = op(B)^T op(A)^T, so the call
// computes (N, M, K) with B first and A second, each keeping its own transpose flag; no
// operand is copied or transposed. Rank 3 runs the batch as one strided-batched call.
// bfloat16 and float16 take the 16-bit GEMM (float32 accumulation, tensor cores) as they are:
// the GPU kernel backend lists matmul among its native 16-bit kernels (float32_compute.h).
#pragma once
#include "engine/cuda/kernels.h"

namespace keras::gpu_kernels {

inline GemmCall row_major_gemm(std::int64_t batch, std::int64_t m, std::int64_t n,
                               std::int64_t k, bool transpose_a, bool transpose_b) {
  GemmCall call;
  call.transpose_a = transpose_b;  // the call's first operand is our B
  call.transpose_b = transpose_a;
  call.m = n;
  call.n = m;
  call.k = k;
  call.lda = transpose_b ? k : n;  // B is [N,K] when transposed, else [K,N], row-major
  call.ldb = transpose_a ? m : k;  // A is [K,M] when transposed, else [M,K]
  call.ldc = n;
  call.stride_a = k * n;
  call.stride_b = m * k;
  call.stride_c = m * n;
  call.batch = batch;
  return call;
}

template <class Launcher>
void matmul(Launcher& launcher, const Tensor& a, const Tensor& b, bool transpose_a,
            bool transpose_b, Tensor& out) {
  int r = a.rank();
  std::int64_t batch = r == 3 ? a.shape()[0] : 1;
  std::int64_t m = out.shape()[r - 2];
  std::int64_t n = out.shape()[r - 1];
  std::int64_t k = transpose_a ? a.shape()[r - 2] : a.shape()[r - 1];
  if (m == 0 || n == 0 || batch == 0) return;
  if (k == 0) {
    fill(launcher, out, 0.0);
    return;
  }
  GemmCall call = row_major_gemm(batch, m, n, k, transpose_a, transpose_b);
  if (a.dtype() == DType::float32) {
    launcher.gemm(call, static_cast<const float*>(b.raw_data()),
                  static_cast<const float*>(a.raw_data()), static_cast<float*>(out.raw_data()));
  } else if (a.dtype() == DType::float64) {
    launcher.gemm(call, static_cast<const double*>(b.raw_data()),
                  static_cast<const double*>(a.raw_data()), static_cast<double*>(out.raw_data()));
  } else if (a.dtype() == DType::bfloat16) {
    launcher.gemm(call, static_cast<const BFloat16*>(b.raw_data()),
                  static_cast<const BFloat16*>(a.raw_data()), static_cast<BFloat16*>(out.raw_data()));
  } else if (a.dtype() == DType::float16) {
    launcher.gemm(call, static_cast<const Float16*>(b.raw_data()),
                  static_cast<const Float16*>(a.raw_data()), static_cast<Float16*>(out.raw_data()));
  } else {
    throw DTypeError(str("matmul supports float32, float64, bfloat16 and float16, got ", dtype_name(a.dtype())));
  }
}

}  // namespace keras::gpu_kernels
