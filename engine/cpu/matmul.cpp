// CPU matrix multiplication. float32 goes to oneDNN's sgemm, float64 to Eigen.
// Measured here (one core, AVX-512, shapes of the 784-1024-1024-10 MLP at batch 128):
// oneDNN sgemm 136-165 GFLOP/s, Eigen 3.4 125-135, Debian's OpenBLAS 0.3.21 serial 28
// (71 with OPENBLAS_CORETYPE=Haswell), BLIS 0.9 65-75. We split the rows of the output across
// our own thread pool and call sgemm single-threaded inside each part, so oneDNN's OpenMP runtime
// never starts a second (spinning) pool.
#include <dnnl.h>
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>

#include "engine/cpu/kernels.h"
#include "engine/errors.h"
#include "engine/thread_pool.h"

namespace keras::cpu {
namespace {

void limit_openmp_to_this_thread() {
  thread_local bool done = false;
  if (!done) {
    omp_set_num_threads(1);
    done = true;
  }
}

// One product op(A)[M,K] @ op(B)[K,N] = C[M,N], row-major. Split across the pool by rows of C
// when C is tall, by columns when it is wide, and not at all when the product is small.
void sgemm_rows(const float* a, const float* b, float* c, std::int64_t m, std::int64_t n,
                std::int64_t k, bool transpose_a, bool transpose_b) {
  std::int64_t lda = transpose_a ? m : k;
  std::int64_t ldb = transpose_b ? k : n;
  auto run = [&](std::int64_t row_begin, std::int64_t row_end, std::int64_t column_begin,
                 std::int64_t column_end) {
    limit_openmp_to_this_thread();
    const float* a_part = transpose_a ? a + row_begin : a + row_begin * lda;
    const float* b_part = transpose_b ? b + column_begin * ldb : b + column_begin;
    dnnl_status_t status =
        dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', row_end - row_begin,
                   column_end - column_begin, k, 1.0f, a_part, lda, b_part, ldb, 0.0f,
                   c + row_begin * n + column_begin, n);
    if (status != dnnl_success) {
      throw Error(str("oneDNN sgemm failed with status ", static_cast<int>(status), " for M=",
                      row_end - row_begin, " N=", column_end - column_begin, " K=", k));
    }
  };
  // Below ~4 M multiply-adds (about 30 us on one core) waking a pool thread costs more than it
  // saves: 128x1024x10 ran at 16 GFLOP/s on two threads against 48 on one (measured).
  if (m * n * k < (std::int64_t{1} << 22)) {
    run(0, m, 0, n);
    return;
  }
  if (m >= n) {
    parallel_for(m, 32, [&](std::int64_t begin, std::int64_t end) { run(begin, end, 0, n); });
  } else {
    // Blocks of 64 columns keep each part a whole number of oneDNN's column panels.
    std::int64_t panels = (n + 63) / 64;
    parallel_for(panels, 1, [&](std::int64_t begin, std::int64_t end) {
      run(0, m, begin * 64, std::min(n, end * 64));
    });
  }
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
    throw DTypeError(str("matmul supports float32 and float64, got ", dtype_name(a.dtype())));
  }
}

}  // namespace keras::cpu
