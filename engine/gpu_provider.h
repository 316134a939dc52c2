// What serves the `gpu` devices: their kernels, their memory, copies between them and the host,
// and how many there are. The engine core (the allocator, Tensor::to, backend_for, the default
// device) reaches GPUs only through gpu_provider(), so something other than this build's own
// runtime can serve them, the way PyTorch lets an out-of-tree backend register for a device
// type: a simulator, a remote device, host memory standing in for a GPU. The built-in provider
// is this build's (engine/gpu_runtime.h and gpu_backend(): CUDA and cuBLAS in a CUDA build; in
// a CPU-only one no GPUs, and every call says why).
#pragma once
#include <cstddef>
#include <string>

#include "engine/backend.h"

namespace keras {

class GpuProvider {
 public:
  virtual ~GpuProvider() = default;
  // The devices are gpu:0 to gpu:count()-1.
  virtual int count() const = 0;
  // Why there are as many as there are, for errors: "3 GPU(s): gpu:0 NVIDIA H200, …",
  // "this keras-cpp was built without CUDA".
  virtual std::string description() const = 0;
  // The kernels of every gpu device.
  virtual Backend& backend() = 0;
  // Memory on gpu:`index`, which the allocator caches (engine/allocator.h). allocate throws
  // OutOfMemoryError when there is too little (the allocator then gives back its cache and asks
  // once more) and ValueError for a device that does not exist.
  virtual void* allocate(std::size_t bytes, int index) = 0;
  virtual void free(void* pointer, int index) = 0;
  // Copies between host memory and gpu:`index`. A copy to the host is a read from the device:
  // it throws what the device's kernels found and deferred (engine/index_check.h).
  virtual void copy_to_device(void* device_pointer, const void* host_pointer, std::size_t bytes,
                              int index) = 0;
  virtual void copy_to_host(void* host_pointer, const void* device_pointer, std::size_t bytes,
                            int index) = 0;
};

// The provider serving gpu devices now: the built-in one unless a ScopedGpuProviderOverride
// lives.
GpuProvider& gpu_provider();
// This build's own, whatever serves gpu devices now: its count() is how many real GPUs there are.
GpuProvider& built_in_gpu_provider();

// Puts `provider` in place of the current one while it lives. The memory cached for gpu devices
// goes back to the provider that allocated it when the override begins and when it ends, so GPU
// tensors made under a provider must die before it is replaced. Not for concurrent use with
// other overrides, nor while other threads make tensors.
class ScopedGpuProviderOverride {
 public:
  explicit ScopedGpuProviderOverride(GpuProvider& provider);
  ~ScopedGpuProviderOverride();
  ScopedGpuProviderOverride(const ScopedGpuProviderOverride&) = delete;
  ScopedGpuProviderOverride& operator=(const ScopedGpuProviderOverride&) = delete;

 private:
  GpuProvider* previous_;
};

}  // namespace keras
