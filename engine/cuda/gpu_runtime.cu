// CUDA build: device count, memory and copies through the CUDA runtime. A machine without a GPU
// (or without a driver) reports zero devices instead of failing, so CPU code keeps working.
#include <cuda_runtime.h>

#include "engine/errors.h"
#include "engine/gpu_runtime.h"

namespace keras::gpu {
namespace {
void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(str(what, " failed: ", cudaGetErrorString(status)));
  }
}
void select(int device_index) { check(cudaSetDevice(device_index), "cudaSetDevice"); }
}  // namespace

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

void* allocate(std::size_t bytes, int device_index) {
  int count = device_count();
  if (device_index >= count) {
    throw ValueError(str("device gpu:", device_index, " does not exist: CUDA reports ", count,
                         " GPU(s) on this machine"));
  }
  select(device_index);
  void* pointer = nullptr;
  check(cudaMalloc(&pointer, bytes), "cudaMalloc");
  return pointer;
}

void free(void* pointer, int device_index) {
  select(device_index);
  check(cudaFree(pointer), "cudaFree");
}

void copy_host_to_device(void* device_pointer, const void* host_pointer, std::size_t bytes,
                         int device_index) {
  select(device_index);
  check(cudaMemcpy(device_pointer, host_pointer, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
}

void copy_device_to_host(void* host_pointer, const void* device_pointer, std::size_t bytes,
                         int device_index) {
  select(device_index);
  check(cudaMemcpy(host_pointer, device_pointer, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
}

void copy_device_to_device(void* destination, const void* source, std::size_t bytes,
                           int device_index) {
  select(device_index);
  check(cudaMemcpy(destination, source, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");
}

}  // namespace keras::gpu
