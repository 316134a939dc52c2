// The switch ScopedGpuEmulation turns; allocator.cpp, tensor.cpp and backend_for read it.
#include "engine/gpu_emulation.h"

#include <atomic>

#include "engine/allocator.h"
#include "engine/errors.h"
#include "engine/gpu_runtime.h"

namespace keras {
namespace {
std::atomic<Backend*> emulation{nullptr};
std::atomic<std::int64_t> reads{0};
}  // namespace

ScopedGpuEmulation::ScopedGpuEmulation(Backend& backend) {
  // A real GPU's cached blocks would be handed to free() when the scope ends.
  if (gpu::device_count() > 0) {
    throw Error("a GPU emulation on a machine with a GPU: use the GPU (tests skip this case)");
  }
  Backend* expected = nullptr;
  if (!emulation.compare_exchange_strong(expected, &backend)) {
    throw Error("a GPU emulation is already active; they do not nest");
  }
}

ScopedGpuEmulation::~ScopedGpuEmulation() {
  release_cached_memory();  // the emulated GPU's cached blocks are host memory
  emulation.store(nullptr);
}

Backend* emulated_gpu() { return emulation.load(std::memory_order_relaxed); }

void note_emulated_gpu_read(Backend& backend, Device source) {
  reads.fetch_add(1, std::memory_order_relaxed);
  backend.raise_deferred_errors(source);
}

std::int64_t emulated_gpu_reads() { return reads.load(std::memory_order_relaxed); }

}  // namespace keras
