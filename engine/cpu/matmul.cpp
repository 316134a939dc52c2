// CPU matrix multiplication. float32 goes to oneDNN's sgemm (A @ B^T to its matmul primitive),
// float64 to Eigen. bfloat16 goes to oneDNN's bf16 matmul where the CPU's bfloat16 multiplies
// pay (AMX, or AVX512-BF16 measured fast), and otherwise, as float16 always, to sgemm on
// float32 copies rounded back once (engine/float32_compute.h's rule, applied here because
// matmul is native on the CPU), made a cache-sized block at a time beside each thread. The
// matmul primitives and the bfloat16 decision: engine/cpu/matmul_primitives.h.
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

// Below ~4 M multiply-adds (about 30 us on one core) waking a pool thread costs more than it
// saves: 128x1024x10 ran at 16 GFLOP/s on two threads against 48 on one (measured).
constexpr std::int64_t kSmallProduct = std::int64_t{1} << 22;

// Splits one product C[M,N] = op(A)[M,K] @ op(B)[K,N] across the pool: by rows of C when C is
// tall or `rows_only`, by columns when it is wide, and not at all when the product is small.
// `run` computes the rows [row_begin, row_end) and columns [column_begin, column_end) of C.
template <typename Run>
void split_product(std::int64_t m, std::int64_t n, std::int64_t k, Run&& run, bool rows_only = false) {
  if (m * n * k < kSmallProduct) {
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

// C = op(A) @ op(B), or C += op(A) @ op(B) when `accumulate`, for one block on the calling
// thread; the layout's ldc is C's row stride.
void sgemm_block(const float* a, const float* b, float* c, const ProductLayout& layout, bool accumulate = false) {
  limit_openmp_to_this_thread();
  if (layout.transpose_b && !layout.transpose_a && !accumulate) {  // faster on the primitive (matmul_primitives.h)
    run_matmul_primitive(float32, a, b, c, layout);
    return;
  }
  dnnl_status_t status = dnnl_sgemm(layout.transpose_a ? 'T' : 'N', layout.transpose_b ? 'T' : 'N', layout.m, layout.n,
                                    layout.k, 1.0f, a, layout.lda, b, layout.ldb, accumulate ? 1.0f : 0.0f, c, layout.ldc);
  if (status != dnnl_success) {
    throw Error(str("oneDNN sgemm failed with status ", static_cast<int>(status), " for M=", layout.m,
                    " N=", layout.n, " K=", layout.k));
  }
}

// One float32 product op(A)[M,K] @ op(B)[K,N] = C[M,N], row-major.
void sgemm_rows(const float* a, const float* b, float* c, std::int64_t m, std::int64_t n,
                std::int64_t k, bool transpose_a, bool transpose_b) {
  std::int64_t lda = transpose_a ? m : k;
  std::int64_t ldb = transpose_b ? k : n;
  split_product(m, n, k, [&](std::int64_t row_begin, std::int64_t row_end, std::int64_t column_begin,
                             std::int64_t column_end) {
    const float* a_part = transpose_a ? a + row_begin : a + row_begin * lda;
    const float* b_part = transpose_b ? b + column_begin * ldb : b + column_begin;
    sgemm_block(a_part, b_part, c + row_begin * n + column_begin,
                {row_end - row_begin, column_end - column_begin, k, lda, ldb, n, transpose_a, transpose_b});
  });
}

// Products too small for split_product to split (the attention's 128x128x32 per batch item
// and head), several in a batch: the items go to the pool's threads instead, so two threads
// share the work (each item alone ran on the calling thread).
bool splits_by_item(std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k) {
  return batch > 1 && m * n * k < kSmallProduct;
}

// Widens rows [first_row, first_row + rows) and columns [first_column, first_column + columns)
// of a row-major matrix with row stride `stride` into `out` (rows x columns, dense).
template <typename Half>
void widen_block(const Half* matrix, std::int64_t stride, std::int64_t first_row, std::int64_t rows,
                 std::int64_t first_column, std::int64_t columns, float* out) {
  if (columns == stride) {
    widen(matrix + first_row * stride, out, rows * columns);
    return;
  }
  for (std::int64_t row = 0; row < rows; ++row) {
    widen(matrix + (first_row + row) * stride + first_column, out + row * columns, columns);
  }
}

// Floats in one block of an operand or of the result: 512 KiB, within the core's L2 (the
// input gradient 2048x512 @ (128x512)^T took 1.97 ms in blocks of 256 KiB, 1.85 in 512 KiB and
// 1.89 in 1 MiB; float32 1.68).
constexpr std::int64_t kBlockFloats = std::int64_t{1} << 17;

// 16-bit products on float32 copies made beside the thread, a block at a time, each result
// rounded once (engine/float32_compute.h's rule), for the CPUs whose bfloat16 multiplies do not
// pay and for float16. Copying whole operands and the whole float32 result first sent every
// element through memory three more times: the conversions are bound by memory (widening 1M
// elements from memory into memory took 0.23 ns an element, 8 or 16 wide; into a buffer in
// cache 0.15), so the copies are blocks of kBlockFloats:
// - small products (the attention's, per batch item and head): whole items, the items split
//   across the threads;
// - B small (a layer's kernel): B widened once, then blocks of rows of op(A) and C;
// - B large and C small (a kernel's gradient, x^T @ dy, k the batch's rows): blocks of k, each
//   block's product added into C in float32 (sgemm's own blocks of k do the same).
template <typename Half>
void half_products_on_float32_blocks(const Half* a, const Half* b, Half* c, std::int64_t batch, std::int64_t m,
                                     std::int64_t n, std::int64_t k, bool transpose_a, bool transpose_b) {
  const std::int64_t lda = transpose_a ? m : k, ldb = transpose_b ? k : n;
  const std::int64_t a_size = m * k, b_size = k * n, c_size = m * n;
  if (m * n * k < kSmallProduct) {
    parallel_for(batch, 1, [&](std::int64_t begin, std::int64_t end) {
      Tensor wide_a = Tensor::empty({a_size}, float32), wide_b = Tensor::empty({b_size}, float32);
      Tensor wide_c = Tensor::empty({c_size}, float32);
      float* pa = elements_of<float>(wide_a);
      float* pb = elements_of<float>(wide_b);
      float* pc = elements_of<float>(wide_c);
      for (std::int64_t item = begin; item < end; ++item) {
        widen(a + item * a_size, pa, a_size);
        widen(b + item * b_size, pb, b_size);
        sgemm_block(pa, pb, pc, {m, n, k, lda, ldb, n, transpose_a, transpose_b});
        narrow(pc, c + item * c_size, c_size);
      }
    });
    return;
  }
  const bool blocks_of_k = b_size >= 2 * kBlockFloats && c_size <= 2 * kBlockFloats;
  Tensor wide_b = blocks_of_k ? Tensor() : Tensor::empty({b_size}, float32);
  for (std::int64_t item = 0; item < batch; ++item) {
    const Half* item_a = a + item * a_size;
    const Half* item_b = b + item * b_size;
    Half* item_c = c + item * c_size;
    if (!blocks_of_k) {
      float* pb = elements_of<float>(wide_b);
      parallel_for(b_size, std::int64_t{1} << 14, [&](std::int64_t begin, std::int64_t end) {
        widen(item_b + begin, pb + begin, end - begin);
      });
    }
    split_product(m, n, k, [&](std::int64_t row_begin, std::int64_t row_end, std::int64_t column_begin,
                               std::int64_t column_end) {
      const std::int64_t rows_in_part = row_end - row_begin, columns = column_end - column_begin;
      // Rows of op(A) and C a block at a time (all of them when blocks of k are taken: C is
      // small), and k a block at a time or whole.
      const std::int64_t block_rows =
          blocks_of_k ? rows_in_part
                      : std::min(rows_in_part, std::max<std::int64_t>(16, kBlockFloats / std::max(columns, k)));
      const std::int64_t block_k =
          blocks_of_k ? std::min(k, std::max<std::int64_t>(16, kBlockFloats / std::max(block_rows, columns))) : k;
      Tensor wide_a = Tensor::empty({block_rows * block_k}, float32), wide_c = Tensor::empty({block_rows * columns}, float32);
      Tensor wide_b_block = blocks_of_k ? Tensor::empty({block_k * columns}, float32) : Tensor();
      float* pa = elements_of<float>(wide_a);
      float* pc = elements_of<float>(wide_c);
      for (std::int64_t first = row_begin; first < row_end; first += block_rows) {
        const std::int64_t rows = std::min(block_rows, row_end - first);
        for (std::int64_t first_k = 0; first_k < k; first_k += block_k) {
          const std::int64_t depth = std::min(block_k, k - first_k);
          // op(A)'s rows [first, first + rows) and columns [first_k, first_k + depth), widened as
          // stored (transposed: A's rows [first_k, ...) and columns [first, ...)).
          if (transpose_a) {
            widen_block(item_a, lda, first_k, depth, first, rows, pa);
          } else {
            widen_block(item_a, lda, first, rows, first_k, depth, pa);
          }
          const float* b_block;
          std::int64_t b_stride;
          if (blocks_of_k) {
            float* pb = elements_of<float>(wide_b_block);
            if (transpose_b) {
              widen_block(item_b, ldb, column_begin, columns, first_k, depth, pb);
              b_stride = depth;
            } else {
              widen_block(item_b, ldb, first_k, depth, column_begin, columns, pb);
              b_stride = columns;
            }
            b_block = pb;
          } else {
            const float* pb = elements_of<float>(wide_b);
            b_block = transpose_b ? pb + column_begin * ldb : pb + column_begin;
            b_stride = ldb;
          }
          sgemm_block(pa, b_block, pc,
                      {rows, columns, depth, transpose_a ? rows : depth, b_stride, columns, transpose_a, transpose_b},
                      /*accumulate=*/first_k > 0);
        }
        for (std::int64_t row = 0; row < rows; ++row) {
          narrow(pc + row * columns, item_c + (first + row) * n + column_begin, columns);
        }
      }
    });
  }
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
    const ProductLayout layout{m, n, k, transpose_a ? m : k, transpose_b ? k : n, n, transpose_a, transpose_b};
    if (splits_by_item(batch, m, n, k) && matmul_primitive_is_fast(bfloat16, layout)) {
      parallel_for(batch, 1, [&](std::int64_t begin, std::int64_t end) {
        limit_openmp_to_this_thread();
        for (std::int64_t i = begin; i < end; ++i) {
          run_matmul_primitive(bfloat16, pa + i * m * k, pb + i * k * n, pc + i * m * n, layout);
        }
      });
      return;
    }
    bool done = true;
    for (std::int64_t i = 0; i < batch && done; ++i) {
      done = bfloat16_gemm_rows(pa + i * m * k, pb + i * k * n, pc + i * m * n, m, n, k, transpose_a,
                                transpose_b);
    }
    if (done) return;
  }
  if (is_half_precision(a.dtype()) && a.dtype() == b.dtype() && a.dtype() == out.dtype()) {
    dispatch_half_precision(a.dtype(), [&](auto half) {
      using Half = decltype(half);
      half_products_on_float32_blocks(elements_of<Half>(a), elements_of<Half>(b), elements_of<Half>(out), batch, m, n,
                                      k, transpose_a, transpose_b);
    });
    return;
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
    if (splits_by_item(batch, m, n, k)) {
      const ProductLayout layout{m, n, k, transpose_a ? m : k, transpose_b ? k : n, n, transpose_a, transpose_b};
      parallel_for(batch, 1, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) sgemm_block(pa + i * m * k, pb + i * k * n, pc + i * m * n, layout);
      });
      return;
    }
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
