// A Backend whose kernels are engine/cuda/'s kernel bodies run by a Launcher made for the
// device of the call's first tensor argument. The CUDA backend is KernelBackend<CudaLauncher>;
// tests/gpu_emulation/ uses KernelBackend<HostLauncher> on host memory. Half-precision
// arguments reach the kernels as float32 (engine/float32_compute.h).
#pragma once
#include <optional>

#include "engine/cuda/kernels.h"
#include "engine/float32_compute.h"

namespace keras::gpu_kernels {

inline void note_device(std::optional<Device>& device, const Tensor& tensor) {
  if (!device && tensor.defined()) device = tensor.device();
}
template <typename Other>
void note_device(std::optional<Device>&, const Other&) {}

// The device of the first defined Tensor among the arguments.
template <typename... Arguments>
Device device_of(const Arguments&... arguments) {
  std::optional<Device> device;
  (note_device(device, arguments), ...);
  if (!device) throw Error("internal error: a kernel was called without a tensor argument");
  return *device;
}

template <class Launcher>
class KernelBackend final : public Backend {
 public:
#define KERAS_UNPACK_ARGUMENTS(...) __VA_ARGS__
#define KERAS_BIND_GPU_KERNEL(name, parameters, arguments)             \
  void name parameters override {                                      \
    float32_compute::call_in_float32(                                  \
        *this, #name, &float32_compute::is_native_on_gpu,              \
        [](auto&... wide) {                                            \
          Launcher launcher(device_of(wide...));                       \
          gpu_kernels::name(launcher, wide...);                        \
        },                                                             \
        KERAS_UNPACK_ARGUMENTS arguments);                             \
  }
  KERAS_KERNELS(KERAS_BIND_GPU_KERNEL)
#undef KERAS_BIND_GPU_KERNEL
#undef KERAS_UNPACK_ARGUMENTS
  void raise_deferred_errors(Device device) override {
    Launcher launcher(device);
    launcher.check_errors();
  }
};

}  // namespace keras::gpu_kernels
