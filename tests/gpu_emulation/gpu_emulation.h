// An emulated GPU for machines without one: while a ScopedGpuEmulation lives, it serves the gpu
// devices (engine/gpu_provider.h). Device::gpu(0) then exists, its memory is host memory and its
// kernels are engine/cuda/'s kernel bodies run on the host (host_launcher.h). Code that places
// tensors on a GPU (layers, the trainer) is checked as a GPU would check it: a tensor left on the
// CPU meets a GPU one in an op and is refused, Tensor::data() on a GPU tensor throws, and the
// errors the kernels defer are thrown at the next read to the host. Tensors made on the emulated
// GPU must die inside the scope.
#pragma once
#include <cstdint>

#include "engine/backend.h"
#include "engine/gpu_provider.h"

namespace keras::testing {

class ScopedGpuEmulation {
 public:
  // Throws on a machine with a GPU (tests use the real one there) and inside another emulation
  // (they do not nest).
  ScopedGpuEmulation();
  ScopedGpuEmulation(const ScopedGpuEmulation&) = delete;
  ScopedGpuEmulation& operator=(const ScopedGpuEmulation&) = delete;

 private:
  ScopedGpuProviderOverride serving_;
};

// Whether a ScopedGpuEmulation serves the gpu devices now.
bool gpu_emulation_active();

// The GPU kernels on host memory, for any tensors: the emulated GPU's, or CPU tensors through
// ScopedCpuBackendOverride.
Backend& emulated_gpu_backend();

// How many copies from the emulated GPU to the host there have been (tests check that a
// training step makes none).
std::int64_t emulated_gpu_reads();

}  // namespace keras::testing
