// CPU-only build: every GPU kernel reports that there is no GPU implementation.
#include "engine/unimplemented_backend.h"

namespace keras {

Backend& gpu_backend() {
  static UnimplementedBackend backend(
      "this keras-cpp was built without CUDA (configure with -DKERAS_CUDA=ON where nvcc exists)");
  return backend;
}

}  // namespace keras
