// The emulated GPU's provider: host memory, the kernel bodies on the host, and a count of the
// reads to the host.
#include "tests/gpu_emulation/gpu_emulation.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "engine/errors.h"
#include "tests/gpu_emulation/host_launcher.h"

namespace keras::testing {
namespace {

std::atomic<std::int64_t> reads{0};

class EmulatedGpu final : public GpuProvider {
 public:
  int count() const override { return 1; }
  std::string description() const override { return "an emulated GPU, gpu:0"; }
  Backend& backend() override { return emulated_gpu_backend(); }
  void* allocate(std::size_t bytes, int index) override {
    if (index != 0) {
      throw ValueError(str("device gpu:", index, " does not exist: the emulated GPU is gpu:0"));
    }
    // The allocator asks for multiples of 64 bytes, as aligned_alloc needs.
    void* pointer = std::aligned_alloc(64, bytes);
    if (pointer == nullptr) {
      throw OutOfMemoryError(str("out of memory: could not allocate ", bytes,
                                 " bytes of host memory for the emulated gpu:0"));
    }
    return pointer;
  }
  void free(void* pointer, int) override { std::free(pointer); }
  void copy_to_device(void* device_pointer, const void* host_pointer, std::size_t bytes,
                      int) override {
    std::memcpy(device_pointer, host_pointer, bytes);
  }
  // As a GPU's read does, this throws the errors its kernels deferred.
  void copy_to_host(void* host_pointer, const void* device_pointer, std::size_t bytes,
                    int index) override {
    std::memcpy(host_pointer, device_pointer, bytes);
    reads.fetch_add(1, std::memory_order_relaxed);
    backend().raise_deferred_errors(Device::gpu(index));
  }
};

EmulatedGpu& emulated_gpu() {
  static EmulatedGpu provider;
  return provider;
}

// Checked before the emulation takes the place of what serves gpu devices now.
GpuProvider& unused_emulated_gpu() {
  if (built_in_gpu_provider().count() > 0) {
    throw Error("a GPU emulation on a machine with a GPU: use the GPU (tests skip this case)");
  }
  if (gpu_emulation_active()) throw Error("a GPU emulation is already active; they do not nest");
  return emulated_gpu();
}

}  // namespace

ScopedGpuEmulation::ScopedGpuEmulation() : serving_(unused_emulated_gpu()) {}

bool gpu_emulation_active() { return &gpu_provider() == &emulated_gpu(); }

Backend& emulated_gpu_backend() {
  static gpu_kernels::KernelBackend<HostLauncher> backend;
  return backend;
}

std::int64_t emulated_gpu_reads() { return reads.load(std::memory_order_relaxed); }

}  // namespace keras::testing
