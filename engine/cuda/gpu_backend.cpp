// CUDA build. Tensors can live on a GPU (memory and copies in gpu_runtime.cu), but the compute
// kernels are the subject of the GPU issue: until they land, each reports that it has no GPU
// implementation yet rather than silently falling back to the CPU.
#include "engine/unimplemented_backend.h"

namespace keras {

Backend& gpu_backend() {
  static UnimplementedBackend backend(
      "the CUDA kernels are not written yet; move the tensor to the CPU with .to(Device::cpu())");
  return backend;
}

}  // namespace keras
