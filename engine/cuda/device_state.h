// Per-GPU state of the CUDA build, made once per device on first use: the compute stream every
// kernel, copy and cuBLAS call of that device is ordered on, the cuBLAS handle bound to it, the
// slot kernels report data errors into, a pinned staging buffer for small copies to the host,
// and the launch width. Also the error checks: every failure names the CUDA call, the device and
// the process, since under mpirun the message may come from any of many GPUs.
//
// Memory is stream-ordered by construction: all of a device's work is on its one compute
// stream, so a block the caching allocator hands out again is only touched by work queued after
// the work that used it. Work on another stream (NCCL's) must make the compute stream wait for
// it (an event) before the tensors it used are released.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>

#include "engine/cuda/index_map.h"

namespace keras::gpu {

struct DeviceState {
  int index = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  gpu_kernels::ErrorReport* error_report = nullptr;  // device memory, zeroed
  gpu_kernels::ErrorReport* error_report_host = nullptr;  // pinned
  void* staging = nullptr;  // pinned, staging_bytes long
  std::size_t staging_bytes = 0;
  std::mutex host_buffers;  // guards staging and error_report_host between host threads
  int launch_blocks = 0;  // enough blocks to fill every SM several times over
};

// Makes `device_index` current on this thread and returns its state (created on first use).
DeviceState& device_state(int device_index);

// "process 1234 on host-a (MPI rank 3)"
const char* process_description();
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, int device_index);
inline void check_cuda(cudaError_t status, const char* call, int device_index) {
  if (status != cudaSuccess) throw_cuda_error(status, call, device_index);
}
void check_cublas(cublasStatus_t status, const char* call, int device_index);

}  // namespace keras::gpu
