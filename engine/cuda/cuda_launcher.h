// Runs engine/cuda/'s kernel bodies on a GPU: a grid-stride loop of 256-thread blocks on the
// device's compute stream, and cuBLAS for the GEMMs. Included by .cu files only.
#pragma once
#include <climits>
#include <typeinfo>

#include "engine/cuda/cublas_library.h"
#include "engine/cuda/device_state.h"
#include "engine/cuda/kernels.h"

namespace keras::gpu_kernels {

template <class Body>
__global__ void run_each(std::int64_t count, Body body) {
  std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < count; i += step) {
    body(i);
  }
}

class CudaLauncher {
 public:
  static constexpr int kThreadsPerBlock = 256;

  explicit CudaLauncher(Device device) : state_(gpu::device_state(device.index)) {}

  template <class Body>
  void for_each(std::int64_t count, const Body& body) {
    if (count <= 0) return;
    std::int64_t needed = (count + kThreadsPerBlock - 1) / kThreadsPerBlock;
    auto blocks = static_cast<unsigned>(needed < state_.launch_blocks ? needed : state_.launch_blocks);
    run_each<<<blocks, kThreadsPerBlock, 0, state_.stream>>>(count, body);
    after_launch(typeid(Body).name());
  }

  ErrorReport* error_report() { return state_.error_report; }

  void check_errors() {
    std::lock_guard lock(state_.host_buffers);
    gpu::check_cuda(cudaMemcpyAsync(state_.error_report_host, state_.error_report,
                                    sizeof(ErrorReport), cudaMemcpyDeviceToHost, state_.stream),
                    "cudaMemcpyAsync (kernel error report)", state_.index);
    gpu::check_cuda(cudaStreamSynchronize(state_.stream), "cudaStreamSynchronize", state_.index);
    ErrorReport report = *state_.error_report_host;
    if (report.code != 0) {
      gpu::check_cuda(cudaMemsetAsync(state_.error_report, 0, sizeof(ErrorReport), state_.stream),
                      "cudaMemsetAsync", state_.index);
      throw_reported_error(report);
    }
  }

  void copy(void* destination, const void* source, std::size_t bytes) {
    gpu::check_cuda(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice,
                                    state_.stream),
                    "cudaMemcpyAsync (device to device)", state_.index);
  }

  void gemm(const GemmCall& call, const float* a, const float* b, float* c) {
    const float one = 1.0f, beta = call.accumulate ? 1.0f : 0.0f;
    check_sizes(call);
    gpu::check_cublas(gpu::cublas().sgemm_strided_batched(
                          state_.blas, operation(call.transpose_a), operation(call.transpose_b),
                          narrow(call.m), narrow(call.n), narrow(call.k), &one, a,
                          narrow(call.lda), call.stride_a, b, narrow(call.ldb), call.stride_b,
                          &beta, c, narrow(call.ldc), call.stride_c, narrow(call.batch)),
                      "cublasSgemmStridedBatched", state_.index);
  }
  void gemm(const GemmCall& call, const double* a, const double* b, double* c) {
    const double one = 1.0, beta = call.accumulate ? 1.0 : 0.0;
    check_sizes(call);
    gpu::check_cublas(gpu::cublas().dgemm_strided_batched(
                          state_.blas, operation(call.transpose_a), operation(call.transpose_b),
                          narrow(call.m), narrow(call.n), narrow(call.k), &one, a,
                          narrow(call.lda), call.stride_a, b, narrow(call.ldb), call.stride_b,
                          &beta, c, narrow(call.ldc), call.stride_c, narrow(call.batch)),
                      "cublasDgemmStridedBatched", state_.index);
  }

  // bfloat16 and float16 operands and result, float32 accumulation (CUBLAS_COMPUTE_32F: the
  // tensor cores' 16-bit inputs, float32 sums), the result rounded once.
  void gemm(const GemmCall& call, const BFloat16* a, const BFloat16* b, BFloat16* c) {
    sixteen_bit_gemm(call, a, b, c, CUDA_R_16BF);
  }
  void gemm(const GemmCall& call, const Float16* a, const Float16* b, Float16* c) {
    sixteen_bit_gemm(call, a, b, c, CUDA_R_16F);
  }

  Device device() const { return Device::gpu(state_.index); }

 private:
  void sixteen_bit_gemm(const GemmCall& call, const void* a, const void* b, void* c, cudaDataType type) {
    const float one = 1.0f, beta = call.accumulate ? 1.0f : 0.0f;
    check_sizes(call);
    gpu::check_cublas(gpu::cublas().gemm_strided_batched_ex(
                          state_.blas, operation(call.transpose_a), operation(call.transpose_b),
                          narrow(call.m), narrow(call.n), narrow(call.k), &one, a, type,
                          narrow(call.lda), call.stride_a, b, type, narrow(call.ldb), call.stride_b,
                          &beta, c, type, narrow(call.ldc), call.stride_c, narrow(call.batch),
                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      "cublasGemmStridedBatchedEx", state_.index);
  }
  static cublasOperation_t operation(bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }
  static int narrow(std::int64_t value) { return static_cast<int>(value); }
  void check_sizes(const GemmCall& call) const {
    for (std::int64_t value : {call.m, call.n, call.k, call.lda, call.ldb, call.ldc, call.batch}) {
      if (value > INT_MAX) {
        throw NotImplementedError(str("matmul on gpu:", state_.index, ": a dimension of ", value,
                                      " exceeds cuBLAS' 32-bit sizes (", INT_MAX, ")"));
      }
    }
  }
  void after_launch(const char* body) {
    // Launch errors (a bad configuration, no kernel image for this GPU) are reported at once;
    // faults inside the kernel surface at the next synchronising call. Debug builds wait for
    // every kernel, so a fault names the kernel that caused it.
    gpu::check_cuda(cudaGetLastError(), body, state_.index);
#ifndef NDEBUG
    gpu::check_cuda(cudaStreamSynchronize(state_.stream), body, state_.index);
#endif
  }

  gpu::DeviceState& state_;
};

}  // namespace keras::gpu_kernels
