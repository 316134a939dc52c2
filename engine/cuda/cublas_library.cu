// cuBLAS loaded on first use (see the header for why).
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "engine/cuda/cublas_library.h"
#include "engine/errors.h"

#ifndef KERAS_CUBLAS_LIBRARY
#error "KERAS_CUBLAS_LIBRARY (the cuBLAS soname of the toolkit) must be defined by the build"
#endif

namespace keras::gpu {
namespace {

template <typename Function>
void resolve(void* library, const char* name, Function& function) {
  void* symbol = dlsym(library, name);
  if (symbol == nullptr) {
    throw Error(str("cuBLAS: ", KERAS_CUBLAS_LIBRARY, " has no symbol '", name,
                    "'; it does not match the toolkit keras-cpp was built with"));
  }
  function = reinterpret_cast<Function>(symbol);
}

CublasLibrary load() {
  // RTLD_NODELETE: handles and streams it made may outlive any reference we could count.
  void* library = dlopen(KERAS_CUBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (library == nullptr) {
    const char* why = dlerror();
    throw Error(str("cuBLAS: cannot load ", KERAS_CUBLAS_LIBRARY, " (", why ? why : "unknown reason",
                    "); the GPU kernels need the cuBLAS of the CUDA toolkit keras-cpp was built with ",
                    "on the library path"));
  }
  CublasLibrary table{};
  resolve(library, "cublasCreate_v2", table.create);
  resolve(library, "cublasSetStream_v2", table.set_stream);
  resolve(library, "cublasSetMathMode", table.set_math_mode);
  resolve(library, "cublasSgemmStridedBatched", table.sgemm_strided_batched);
  resolve(library, "cublasDgemmStridedBatched", table.dgemm_strided_batched);
  resolve(library, "cublasGemmStridedBatchedEx", table.gemm_strided_batched_ex);
  resolve(library, "cublasGetStatusName", table.status_name);
  resolve(library, "cublasGetStatusString", table.status_string);
  return table;
}

}  // namespace

const CublasLibrary& cublas() {
  // A failed load is not remembered: the next call tries again (and says why again).
  static std::mutex mutex;
  static CublasLibrary table{};
  static bool loaded = false;
  std::lock_guard lock(mutex);
  if (!loaded) {
    table = load();
    loaded = true;
  }
  return table;
}

}  // namespace keras::gpu
