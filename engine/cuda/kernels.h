// The GPU kernels of engine/kernel_list.h, as templates over a Launcher that runs them. The
// CUDA backend (cuda_backend.cu) instantiates them with CudaLauncher; tests/gpu_emulation/
// with a launcher that runs each index on the host. One header per kernel family holds the
// bodies (elementwise.h, reduce.h, layout.h, softmax.h, random_fill.h, optimizer_updates.h,
// matmul.h, convolution.h, pooling.h).
//
// A Launcher provides:
//   template <class Body> void for_each(std::int64_t count, const Body& body);
//       body(i) for every i in [0, count), in any order and concurrently; Body is a trivially
//       copyable struct whose operator() is KERAS_HOST_DEVICE.
//   ErrorReport* error_report();   a zeroed slot kernels may report into
//   void check_errors();            waits for the kernels so far, throws what they reported
//   void copy(void* destination, const void* source, std::size_t bytes);  same device
//   template <class T> void gemm(const GemmCall& call, const T* a, const T* b, T* c);
//       column-major batched GEMM with cuBLAS' meaning (float and double)
//   Device device();
#pragma once
#include "engine/backend.h"
#include "engine/kernel_arguments.h"
#include "engine/cuda/index_map.h"

namespace keras::gpu_kernels {

#define KERAS_UNPACK_PARAMETERS(...) __VA_ARGS__
#define KERAS_DECLARE_GPU_KERNEL(name, parameters, arguments) \
  template <class Launcher>                                   \
  void name(Launcher& launcher, KERAS_UNPACK_PARAMETERS parameters);
KERAS_KERNELS(KERAS_DECLARE_GPU_KERNEL)
#undef KERAS_DECLARE_GPU_KERNEL
#undef KERAS_UNPACK_PARAMETERS

// Column-major C = op(A) op(B) for each of `batch` matrices, as cublas<t>gemmStridedBatched.
struct GemmCall {
  bool transpose_a = false, transpose_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  std::int64_t batch = 1;
  bool accumulate = false;  // C += op(A) op(B) (cuBLAS' beta = 1) instead of C =
};

// Calls fn(T{}) for the unsigned type of `bytes` bytes (1, 2, 4 or 8): kernels that only move
// elements copy them as raw words.
template <typename Fn>
decltype(auto) dispatch_element_size(std::size_t bytes, Fn&& fn) {
  switch (bytes) {
    case 1: return fn(std::uint8_t{});
    case 2: return fn(std::uint16_t{});
    case 4: return fn(std::uint32_t{});
    case 8: return fn(std::uint64_t{});
    default: break;
  }
  throw Error(str("internal error: no element type of ", bytes, " bytes"));
}

}  // namespace keras::gpu_kernels

#include "engine/cuda/batch_normalization.h"
#include "engine/cuda/convolution.h"
#include "engine/cuda/elementwise.h"
#include "engine/cuda/layer_normalization.h"
#include "engine/cuda/layout.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/optimizer_updates.h"
#include "engine/cuda/pooling.h"
#include "engine/cuda/random_fill.h"
#include "engine/cuda/reduce.h"
#include "engine/cuda/softmax.h"
