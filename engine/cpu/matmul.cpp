// CPU matrix multiplication. float32 goes to oneDNN's sgemm (A @ B^T to its matmul primitive),
// float64 to Eigen. bfloat16 goes to oneDNN's bf16 matmul where the CPU's bfloat16 multiplies
// pay (AMX, or AVX512-BF16 measured fast), and otherwise, as float16 always, to sgemm on
// float32 copies rounded back once (engine/float32_compute.h's rule, applied here because
// matmul is native on the CPU). The matmul primitives and the bfloat16 decision:
// engine/cpu/matmul_primitives.h.
// Measured here (one core, AVX-512, shapes of the 784-1024-1024-10 MLP at batch 128):
// oneDNN sgemm 136-165 GFLOP/s, Eigen 3.4 125-135, Debian's OpenBLAS 0.3.21 serial 28
// (71 with OPENBLAS_CORETYPE=Haswell), BLIS 0.9 65-75. We split the rows of the output across
// our own thread pool and call sgemm single-threaded inside each part, so oneDNN's OpenMP runtime
// never starts a second (spinning) pool.
#include <dnnl.hpp>

#include <Eigen/Core>
#include <algorithm>

#include "engine/cpu/half_conversion.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/matmul_primitives.h"
#include "engine/cpu/onednn_threads.h"
#include "engine/errors.h"
#include "engine/thread_pool.h"

namespace keras::cpu {
namespace {

// Splits one product C[M,N] = op(A)[M,K] @ op(B)[K,N] across the pool: by rows of C when C is
// tall or `rows_only`, by columns when it is wide, and not at all when the product is small.
// `run` computes the rows [row_begin, row_end) and columns [column_begin, column_end) of C.
template <typename Run>
void split_product(std::int64_t m, std::int64_t n, std::int64_t k, Run&& run, bool rows_only = false) {
  // Below ~4 M multiply-adds (about 30 us on one core) waking a pool thread costs more than it
  // saves: 128x1024x10 ran at 16 GFLOP/s on two threads against 48 on one (measured).
  if (m * n * k < (std::int64_t{1} << 22)) {
    run(0, m, 0, n);
    return;
  }
  if (m >= n || rows_only) {
    parallel_for(m, 32, [&](std::int64_t begin, std::int64_t end) { run(begin, end, 0, n); });
  } else {
    // Blocks of 64 columns keep each part a whole number of oneDNN's column panels.
    std::int64_t panels = (n + 63) / 64;
    parallel_for(panels, 1, [&](std::int64_t begin, std::int64_t end) {
      run(0, m, begin * 64, std::min(n, end * 64));
    });
  }
}

// One float32 product op(A)[M,K] @ op(B)[K,N] = C[M,N], row-major.
void sgemm_rows(const float* a, const float* b, float* c, std::int64_t m, std::int64_t n,
                std::int64_t k, bool transpose_a, bool transpose_b) {
  std::int64_t lda = transpose_a ? m : k;
  std::int64_t ldb = transpose_b ? k : n;
  split_product(m, n, k, [&](std::int64_t row_begin, std::int64_t row_end, std::int64_t column_begin,
                             std::int64_t column_end) {
    limit_openmp_to_this_thread();
    const float* a_part = transpose_a ? a + row_begin : a + row_begin * lda;
    const float* b_part = transpose_b ? b + column_begin * ldb : b + column_begin;
    if (transpose_b && !transpose_a) {  // faster on the primitive (matmul_primitives.h)
      run_matmul_primitive(float32, a_part, b_part, c + row_begin * n + column_begin,
                           {row_end - row_begin, column_end - column_begin, k, lda, ldb, n, false, true});
      return;
    }
    dnnl_status_t status =
        dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', row_end - row_begin,
                   column_end - column_begin, k, 1.0f, a_part, lda, b_part, ldb, 0.0f,
                   c + row_begin * n + column_begin, n);
    if (status != dnnl_success) {
      throw Error(str("oneDNN sgemm failed with status ", static_cast<int>(status), " for M=",
                      row_end - row_begin, " N=", column_end - column_begin, " K=", k));
    }
  });
}

// One bfloat16 product on the CPU's bf16 instructions, split as sgemm_rows. False (nothing
// written) when oneDNN offers only its reference code for this shape: the caller then takes the
// float32 route, which is faster than any reference loop.
bool bfloat16_gemm_rows(const BFloat16* a, const BFloat16* b, BFloat16* c, std::int64_t m,
                        std::int64_t n, std::int64_t k, bool transpose_a, bool transpose_b) {
  std::int64_t lda = transpose_a ? m : k;
  std::int64_t ldb = transpose_b ? k : n;
  // Whether the whole product (the largest part) has a fast primitive, asked once up front so
  // that no part is written when another part would be refused.
  if (!matmul_primitive_is_fast(bfloat16, {m, n, k, lda, ldb, n, transpose_a, transpose_b})) return false;
  // By rows only: a part of rows of C (and of A, untransposed) is a dense block, the only layout
  // oneDNN's AMX kernels (brgemm) take; a column part of B and C is strided and would run on its
  // slower gemm kernels. (A transposed A's row part is strided either way.)
  split_product(m, n, k, [&](std::int64_t row_begin, std::int64_t row_end, std::int64_t column_begin,
                             std::int64_t column_end) {
    limit_openmp_to_this_thread();
    const BFloat16* a_part = transpose_a ? a + row_begin : a + row_begin * lda;
    const BFloat16* b_part = transpose_b ? b + column_begin * ldb : b + column_begin;
    run_matmul_primitive(bfloat16, a_part, b_part, c + row_begin * n + column_begin,
                         {row_end - row_begin, column_end - column_begin, k, lda, ldb, n, transpose_a, transpose_b});
  }, /*rows_only=*/true);
  return true;
}

void dgemm_rows(const double* a, const double* b, double* c, std::int64_t m, std::int64_t n,
                std::int64_t k, bool transpose_a, bool transpose_b) {
  using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const RowMatrix> a_matrix(a, transpose_a ? k : m, transpose_a ? m : k);
  Eigen::Map<const RowMatrix> b_matrix(b, transpose_b ? n : k, transpose_b ? k : n);
  Eigen::Map<RowMatrix> c_matrix(c, m, n);
  if (transpose_a && transpose_b) {
    c_matrix.noalias() = a_matrix.transpose() * b_matrix.transpose();
  } else if (transpose_a) {
    c_matrix.noalias() = a_matrix.transpose() * b_matrix;
  } else if (transpose_b) {
    c_matrix.noalias() = a_matrix * b_matrix.transpose();
  } else {
    c_matrix.noalias() = a_matrix * b_matrix;
  }
}

}  // namespace

void matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, Tensor& out) {
  int r = a.rank();
  std::int64_t batch = r == 3 ? a.shape()[0] : 1;
  std::int64_t m = out.shape()[r - 2];
  std::int64_t n = out.shape()[r - 1];
  std::int64_t k = transpose_a ? a.shape()[r - 2] : a.shape()[r - 1];
  if (m == 0 || n == 0) return;
  if (k == 0) {
    fill(out, 0.0);
    return;
  }
  if (a.dtype() == bfloat16 && b.dtype() == bfloat16 && out.dtype() == bfloat16 && cpu_multiplies_bfloat16()) {
    const auto* pa = static_cast<const BFloat16*>(a.raw_data());
    const auto* pb = static_cast<const BFloat16*>(b.raw_data());
    auto* pc = static_cast<BFloat16*>(out.raw_data());
    bool done = true;
    for (std::int64_t i = 0; i < batch && done; ++i) {
      done = bfloat16_gemm_rows(pa + i * m * k, pb + i * k * n, pc + i * m * n, m, n, k, transpose_a,
                                transpose_b);
    }
    if (done) return;
  }
  if (is_half_precision(a.dtype()) || is_half_precision(b.dtype()) || is_half_precision(out.dtype())) {
    // float32 copies, one rounding of each result (engine/float32_compute.h); also where a
    // 16-bit tensor meets a float32 one (a float32 seed's gradient).
    round_into(out, [&](Tensor& wide) { matmul(float32_copy(a), float32_copy(b), transpose_a, transpose_b, wide); });
    return;
  }
  if (a.dtype() == float32) {
    const float* pa = static_cast<const float*>(a.raw_data());
    const float* pb = static_cast<const float*>(b.raw_data());
    float* pc = static_cast<float*>(out.raw_data());
    for (std::int64_t i = 0; i < batch; ++i) {
      sgemm_rows(pa + i * m * k, pb + i * k * n, pc + i * m * n, m, n, k, transpose_a,
                 transpose_b);
    }
  } else if (a.dtype() == float64) {
    const double* pa = static_cast<const double*>(a.raw_data());
    const double* pb = static_cast<const double*>(b.raw_data());
    double* pc = static_cast<double*>(out.raw_data());
    parallel_for(batch, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        dgemm_rows(pa + i * m * k, pb + i * k * n, pc + i * m * n, m, n, k, transpose_a,
                   transpose_b);
      }
    });
  } else {
    throw DTypeError(str("matmul supports float32, float64, bfloat16 and float16, got ", dtype_name(a.dtype())));
  }
}

}  // namespace keras::cpu
