// For tests on machines without a GPU: while a ScopedGpuEmulation lives, Device::gpu(0) exists,
// its memory is host memory and its kernels are the given backend (tests/gpu_emulation/ passes
// the CUDA kernel bodies run on the host). Code that places tensors on a GPU (layers, the
// trainer) is then checked as a GPU would check it: a tensor left on the CPU meets a GPU one in
// an op and is refused, and Tensor::data() on a GPU tensor throws. Tensors made on the emulated
// GPU must die inside the scope; the scope returns the cached blocks when it ends.
#pragma once
#include <cstdint>

#include "engine/backend.h"

namespace keras {

class ScopedGpuEmulation {
 public:
  explicit ScopedGpuEmulation(Backend& backend);
  ~ScopedGpuEmulation();
  ScopedGpuEmulation(const ScopedGpuEmulation&) = delete;
  ScopedGpuEmulation& operator=(const ScopedGpuEmulation&) = delete;
};

// The emulation's backend, or null when none is active (for backend_for, the allocator and
// Tensor::to).
Backend* emulated_gpu();

// Tensor::to's copy from the emulated GPU to the host: counts it and, as a GPU's read does,
// throws the errors its kernels deferred.
void note_emulated_gpu_read(Backend& backend, Device source);
// How many copies from the emulated GPU to the host there have been (tests check that a
// training step makes none).
std::int64_t emulated_gpu_reads();

}  // namespace keras
