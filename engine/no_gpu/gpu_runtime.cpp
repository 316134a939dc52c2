// CPU-only build: there are no GPUs. Anything that would need one says so.
#include "engine/errors.h"
#include "engine/gpu_runtime.h"

namespace keras::gpu {
namespace {
[[noreturn]] void no_gpu(const char* what) {
  throw NotImplementedError(str(what, " has no GPU implementation: this keras-cpp was built "
                                      "without CUDA (configure with -DKERAS_CUDA=ON)"));
}
}  // namespace

int device_count() { return 0; }
std::string description() { return "this keras-cpp was built without CUDA"; }
void* allocate(std::size_t, int) { no_gpu("GPU memory allocation"); }
void free(void*, int) { no_gpu("GPU memory release"); }
void copy_host_to_device(void*, const void*, std::size_t, int) { no_gpu("copy to GPU"); }
void copy_device_to_host(void*, const void*, std::size_t, int) { no_gpu("copy from GPU"); }
void copy_device_to_device(void*, const void*, std::size_t, int) { no_gpu("GPU copy"); }
void synchronize(int) { no_gpu("GPU synchronisation"); }
void* compute_stream(int) { no_gpu("a GPU stream"); }

}  // namespace keras::gpu
