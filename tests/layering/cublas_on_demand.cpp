// CUDA builds: cuBLAS is not mapped until the engine first asks for it, then it loads from the
// toolkit's soname and every function the engine calls resolves (engine/cuda/cublas_library.h).
// No GPU is needed: loading the library and naming a status touch no device.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "engine/cuda/cublas_library.h"

namespace {
bool cublas_mapped() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find("libcublas") != std::string::npos) return true;
  }
  return false;
}
}  // namespace

int main() {
  if (cublas_mapped()) {
    std::printf("FAIL: cuBLAS is mapped before anything asked for it\n");
    return 1;
  }
  const keras::gpu::CublasLibrary& library = keras::gpu::cublas();
  const char* name = library.status_name(CUBLAS_STATUS_NOT_INITIALIZED);
  if (!cublas_mapped() || name == nullptr || std::strcmp(name, "CUBLAS_STATUS_NOT_INITIALIZED") != 0) {
    std::printf("FAIL: after loading, mapped=%d, status name '%s'\n", cublas_mapped() ? 1 : 0, name ? name : "(null)");
    return 1;
  }
  std::printf("cuBLAS loaded on demand: %s\n", name);
  return 0;
}
