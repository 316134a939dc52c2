// The built-in GPU provider, which hands every call to this build's GPU runtime and kernels
// (engine/cuda/ or engine/no_gpu/), and the switch that puts another in its place.
#include "engine/gpu_provider.h"

#include <atomic>

#include "engine/allocator.h"
#include "engine/gpu_runtime.h"

namespace keras {
namespace {

class BuiltInGpuProvider final : public GpuProvider {
 public:
  int count() const override { return gpu::device_count(); }
  std::string description() const override { return gpu::description(); }
  Backend& backend() override { return gpu_backend(); }
  void* allocate(std::size_t bytes, int index) override { return gpu::allocate(bytes, index); }
  void free(void* pointer, int index) override { gpu::free(pointer, index); }
  void copy_to_device(void* device_pointer, const void* host_pointer, std::size_t bytes,
                      int index) override {
    gpu::copy_host_to_device(device_pointer, host_pointer, bytes, index);
  }
  void copy_to_host(void* host_pointer, const void* device_pointer, std::size_t bytes,
                    int index) override {
    gpu::copy_device_to_host(host_pointer, device_pointer, bytes, index);
  }
};

// The override's provider; null while the built-in one serves. Null is a constant initialiser,
// so gpu_provider() is right even when another file's static initialiser calls it first.
std::atomic<GpuProvider*> overriding{nullptr};

}  // namespace

GpuProvider& built_in_gpu_provider() {
  static BuiltInGpuProvider provider;
  return provider;
}

GpuProvider& gpu_provider() {
  GpuProvider* provider = overriding.load(std::memory_order_acquire);
  return provider != nullptr ? *provider : built_in_gpu_provider();
}

ScopedGpuProviderOverride::ScopedGpuProviderOverride(GpuProvider& provider) {
  release_cached_memory();  // the cached GPU blocks are the current provider's to free
  previous_ = overriding.exchange(&provider, std::memory_order_acq_rel);
}

ScopedGpuProviderOverride::~ScopedGpuProviderOverride() {
  release_cached_memory();  // while the provider that allocated them still serves
  overriding.store(previous_, std::memory_order_release);
}

}  // namespace keras
