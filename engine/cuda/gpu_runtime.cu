// CUDA build: devices, their state (engine/cuda/device_state.h), memory and copies. A machine
// without a GPU (or without a driver) reports zero devices instead of failing, so CPU code keeps
// working in a CUDA build.
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "engine/cuda/cublas_library.h"
#include "engine/cuda/device_state.h"
#include "engine/environment.h"
#include "engine/errors.h"
#include "engine/gpu_runtime.h"

namespace keras::gpu {
namespace {

constexpr int kMaxDevices = 16;  // as the allocator's pools
// Copies to the host up to this size go through pinned memory (a D2H copy from pageable memory
// is staged by the driver anyway, in smaller pieces); larger ones go straight to their target.
constexpr std::size_t kStagingBytes = std::size_t{4} << 20;

std::mutex state_mutex;
std::array<std::unique_ptr<DeviceState>, kMaxDevices> states;

// Asks CUDA which device is current rather than remembering it: NCCL's setup and other
// libraries set it behind our back, and a stale memory of it would put allocations and
// kernels on the wrong GPU. cudaGetDevice reads a thread-local value.
void make_current(int device_index) {
  int current = -1;
  check_cuda(cudaGetDevice(&current), "cudaGetDevice", device_index);
  if (current != device_index) check_cuda(cudaSetDevice(device_index), "cudaSetDevice", device_index);
}

void check_index(int device_index) {
  int count = device_count();
  if (device_index < 0 || device_index >= count) {
    throw ValueError(str("device gpu:", device_index, " does not exist: ", description()));
  }
  if (device_index >= kMaxDevices) {
    throw NotImplementedError(str("device gpu:", device_index, ": at most ", kMaxDevices,
                                  " GPUs per process are supported"));
  }
}

std::unique_ptr<DeviceState> make_state(int device_index) {
  auto state = std::make_unique<DeviceState>();
  state->index = device_index;
  check_cuda(cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking),
             "cudaStreamCreateWithFlags", device_index);
  check_cublas(cublas().create(&state->blas), "cublasCreate", device_index);
  check_cublas(cublas().set_stream(state->blas, state->stream), "cublasSetStream", device_index);
  // float32 products in float32, as on the CPU: TF32 tensor cores only when asked for
  // (KERAS_ALLOW_TF32=1; NVIDIA_TF32_OVERRIDE=0 still forbids them driver-wide). 16-bit GEMMs
  // reduce in float32 only: without DISALLOW_REDUCED_PRECISION_REDUCTION cuBLAS may sum
  // split-K partial results in bfloat16/float16, rounding more than once.
  bool allow_tf32 = environment::integer("KERAS_ALLOW_TF32", 0, 1).value_or(0) == 1;
  const auto math_mode = static_cast<cublasMath_t>(
      (allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  check_cublas(cublas().set_math_mode(state->blas, math_mode), "cublasSetMathMode", device_index);
  check_cuda(cudaMalloc(&state->error_report, sizeof(gpu_kernels::ErrorReport)), "cudaMalloc",
             device_index);
  check_cuda(cudaMemsetAsync(state->error_report, 0, sizeof(gpu_kernels::ErrorReport),
                             state->stream),
             "cudaMemsetAsync", device_index);
  check_cuda(cudaMallocHost(&state->error_report_host, sizeof(gpu_kernels::ErrorReport)),
             "cudaMallocHost", device_index);
  check_cuda(cudaMallocHost(&state->staging, kStagingBytes), "cudaMallocHost", device_index);
  state->staging_bytes = kStagingBytes;
  int processors = 0;
  check_cuda(cudaDeviceGetAttribute(&processors, cudaDevAttrMultiProcessorCount, device_index),
             "cudaDeviceGetAttribute", device_index);
  state->launch_blocks = processors * 8;
  return state;
}

}  // namespace

const char* process_description() {
  static const std::string description = [] {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    std::string text = str("process ", getpid(), " on ", host);
    if (const char* rank = std::getenv("OMPI_COMM_WORLD_RANK")) text += str(" (MPI rank ", rank, ")");
    return text;
  }();
  return description.c_str();
}

void throw_cuda_error(cudaError_t status, const char* call, int device_index) {
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  std::string message = str(call, " failed on gpu:", device_index, " in ", process_description(),
                            ": ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
  if (status == cudaErrorMemoryAllocation) throw OutOfMemoryError(message);
  throw Error(message);
}

void check_cublas(cublasStatus_t status, const char* call, int device_index) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw Error(str(call, " failed on gpu:", device_index, " in ", process_description(), ": ",
                    cublas().status_name(status), " (", cublas().status_string(status), ")"));
  }
}

DeviceState& device_state(int device_index) {
  check_index(device_index);
  make_current(device_index);
  std::lock_guard lock(state_mutex);
  auto& state = states[device_index];
  if (!state) state = make_state(device_index);
  return *state;
}

int device_count() {
  static const int count = [] {
    int found = 0;
    if (cudaGetDeviceCount(&found) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no driver" error
      return 0;
    }
    return found;
  }();
  return count;
}

std::string description() {
  int found = 0;
  cudaError_t status = cudaGetDeviceCount(&found);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return str("CUDA reports no GPU: ", cudaGetErrorString(status));
  }
  std::string text = str(found, " GPU(s)");
  for (int i = 0; i < found; ++i) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, i) == cudaSuccess) {
      text += str(i == 0 ? ": " : ", ", "gpu:", i, " ", properties.name);
    }
  }
  return text;
}

void* allocate(std::size_t bytes, int device_index) {
  device_state(device_index);
  void* pointer = nullptr;
  cudaError_t status = cudaMalloc(&pointer, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    std::size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw OutOfMemoryError(str("out of memory on gpu:", device_index, " in ",
                               process_description(), ": cudaMalloc of ", bytes, " bytes (",
                               static_cast<double>(bytes) / (1 << 20), " MiB) failed with ",
                               static_cast<double>(free_bytes) / (1 << 20), " MiB free of ",
                               static_cast<double>(total_bytes) / (1 << 20), " MiB"));
  }
  check_cuda(status, "cudaMalloc", device_index);
  return pointer;
}

void free(void* pointer, int device_index) {
  device_state(device_index);
  check_cuda(cudaFree(pointer), "cudaFree", device_index);
}

void copy_host_to_device(void* device_pointer, const void* host_pointer, std::size_t bytes,
                         int device_index) {
  DeviceState& state = device_state(device_index);
  // From pageable memory the call returns once the source has been read, so the caller may
  // reuse it at once; the copy itself is ordered on the compute stream.
  check_cuda(cudaMemcpyAsync(device_pointer, host_pointer, bytes, cudaMemcpyHostToDevice,
                             state.stream),
             "cudaMemcpyAsync (host to device)", device_index);
}

void copy_device_to_host(void* host_pointer, const void* device_pointer, std::size_t bytes,
                         int device_index) {
  DeviceState& state = device_state(device_index);
  std::lock_guard lock(state.host_buffers);
  bool staged = bytes <= state.staging_bytes;
  check_cuda(cudaMemcpyAsync(staged ? state.staging : host_pointer, device_pointer, bytes,
                             cudaMemcpyDeviceToHost, state.stream),
             "cudaMemcpyAsync (device to host)", device_index);
  // The deferred errors (engine/index_check.h) come back with the data, in the same wait.
  check_cuda(cudaMemcpyAsync(state.error_report_host, state.error_report,
                             sizeof(gpu_kernels::ErrorReport), cudaMemcpyDeviceToHost,
                             state.stream),
             "cudaMemcpyAsync (kernel error report)", device_index);
  check_cuda(cudaStreamSynchronize(state.stream), "cudaStreamSynchronize", device_index);
  if (staged) std::memcpy(host_pointer, state.staging, bytes);
  gpu_kernels::ErrorReport report = *state.error_report_host;
  if (report.code != 0) {
    check_cuda(cudaMemsetAsync(state.error_report, 0, sizeof(gpu_kernels::ErrorReport),
                               state.stream),
               "cudaMemsetAsync (kernel error report)", device_index);
    gpu_kernels::throw_reported_error(report);
  }
}

void copy_device_to_device(void* destination, const void* source, std::size_t bytes,
                           int device_index) {
  DeviceState& state = device_state(device_index);
  check_cuda(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice, state.stream),
             "cudaMemcpyAsync (device to device)", device_index);
}

void* compute_stream(int device_index) { return device_state(device_index).stream; }

void synchronize(int device_index) {
  DeviceState& state = device_state(device_index);
  check_cuda(cudaStreamSynchronize(state.stream), "cudaStreamSynchronize", device_index);
}

}  // namespace keras::gpu
