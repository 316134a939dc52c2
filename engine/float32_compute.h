// How every backend computes on bfloat16 and float16 tensors: a kernel that only moves or
// converts elements (engine/kernel_list.h lists them: fill, cast, transpose, slices, take,
// one_hot, where) takes them natively; any other kernel sees float32 copies of its
// half-precision arguments and writes float32 results that are rounded back once into the
// half-precision outputs. This is XLA's rule for 16-bit ops its CPU and GPU backends have no
// native kernel for (its float-normalization pass), and what keeps sums and matmul
// accumulations in float32. A backend's own 16-bit kernels are listed below (is_native_on_cpu:
// fused element-wise kernels, and matmul and convolution, which run oneDNN's bf16 primitives
// where the CPU's bf16 instructions pay (engine/cpu/matmul_primitives.h) and convert around
// float32 themselves otherwise;
// is_native_on_gpu: cuBLAS' 16-bit GEMM).
//
// The CPU backend (engine/cpu/cpu_backend.cpp) and the GPU kernel backend
// (engine/cuda/kernel_backend.h) wrap each kernel with `call_in_float32`; the conversions run
// on the backend's own cast kernel, on the device the tensors live on.
#pragma once
#include <cstring>
#include <deque>
#include <string_view>
#include <utility>

#include "engine/backend.h"

namespace keras::float32_compute {

// Every name engine/kernel_list.h's property lists give is a kernel of the list.
#define KERAS_CHECK_IS_KERNEL(name) static_assert(sizeof(&Backend::name) > 0, #name " is not a kernel");
KERAS_KERNELS_THAT_ONLY_MOVE_ELEMENTS(KERAS_CHECK_IS_KERNEL)
KERAS_KERNELS_THAT_READ_THEIR_OUTPUTS(KERAS_CHECK_IS_KERNEL)
#undef KERAS_CHECK_IS_KERNEL

#define KERAS_NAME_IS(name) kernel == #name ||
// The kernels that take half-precision tensors as they are, on every backend.
constexpr bool is_native(std::string_view kernel) { return KERAS_KERNELS_THAT_ONLY_MOVE_ELEMENTS(KERAS_NAME_IS) false; }

// The kernels whose non-const tensors are read as well as written (optimizer slots): their
// float32 stand-ins start from the current values. Every other output is only written.
constexpr bool reads_outputs(std::string_view kernel) {
  return KERAS_KERNELS_THAT_READ_THEIR_OUTPUTS(KERAS_NAME_IS) false;
}
#undef KERAS_NAME_IS

// An optimizer update left off the list would get float32 stand-ins that start uninitialised
// and overwrite a 16-bit variable's slots with garbage: every kernel named *_update is listed.
#define KERAS_CHECK_UPDATE_IS_LISTED(name, parameters, arguments)                  \
  static_assert(!std::string_view(#name).ends_with("_update") || reads_outputs(#name), \
                #name " updates in place: list it in KERAS_KERNELS_THAT_READ_THEIR_OUTPUTS");
KERAS_KERNELS(KERAS_CHECK_UPDATE_IS_LISTED)
#undef KERAS_CHECK_UPDATE_IS_LISTED

// The CPU's own: its element-wise, softmax and normalization kernels fuse the
// conversions into their loops (engine/cpu/elementwise.cpp, softmax.cpp,
// batch_normalization.cpp, layer_normalization.cpp); matmul and convolution multiply bfloat16 on the CPU's bf16
// instructions where it has them (engine/cpu/matmul_primitives.h, convolution.cpp).
inline bool is_native_on_cpu(std::string_view kernel) {
  return is_native(kernel) || kernel == "unary" || kernel == "unary_gradient" || kernel == "binary" ||
         kernel == "reduce" || kernel == "softmax" || kernel == "softmax_gradient" || kernel == "matmul" ||
         kernel == "convolution" || kernel == "convolution_input_gradient" ||
         kernel == "convolution_kernel_gradient" || kernel == "batch_normalization_statistics" ||
         kernel == "channel_affine" || kernel == "batch_normalization_gradient" ||
         kernel == "layer_normalization" || kernel == "layer_normalization_gradient";
}

// The GPU's own: matmul and convolution run cuBLAS' 16-bit GEMM (float32 accumulation, tensor
// cores) on bfloat16 and float16 as they are (engine/cuda/matmul.h, convolution.h).
inline bool is_native_on_gpu(std::string_view kernel) {
  return is_native(kernel) || kernel == "matmul" || kernel == "convolution";
}

inline bool is_half_tensor(const Tensor& tensor) {
  return tensor.defined() && is_half_precision(tensor.dtype());
}
template <typename Other>
bool is_half_tensor(const Other&) {
  return false;
}

// Float32 stand-ins for one kernel call's half-precision arguments; the destructor-free
// `finish` rounds the outputs back (not a destructor: a kernel that threw must not write).
class Widening {
 public:
  Widening(Backend& backend, bool read_outputs) : backend_(backend), read_outputs_(read_outputs) {}

  const Tensor& operator()(const Tensor& input) {
    if (!is_half_tensor(input)) return input;
    Tensor& wide = stand_ins_.emplace_back(Tensor::empty(input.local_shape(), float32, input.device()));
    backend_.cast(input, wide);
    return wide;
  }
  Tensor& operator()(Tensor& output) {
    if (!is_half_tensor(output)) return output;
    Tensor& wide = stand_ins_.emplace_back(Tensor::empty(output.local_shape(), float32, output.device()));
    if (read_outputs_) backend_.cast(output, wide);
    outputs_.emplace_back(&output, &wide);
    return wide;
  }
  template <typename Other>
  Other& operator()(Other& argument) {
    return argument;
  }

  void finish() {
    for (auto& [output, wide] : outputs_) backend_.cast(*wide, *output);
  }

 private:
  Backend& backend_;
  bool read_outputs_;
  std::deque<Tensor> stand_ins_;  // a deque: references to its elements stay valid
  std::deque<std::pair<Tensor*, Tensor*>> outputs_;
};

// Runs kernel(arguments...) directly, or on float32 stand-ins when some argument is a
// half-precision tensor and `native` (is_native, or a backend's own list) does not list `name`.
template <typename Kernel, typename... Arguments>
void call_in_float32(Backend& backend, std::string_view name, bool (*native)(std::string_view),
                     Kernel&& kernel, Arguments&... arguments) {
  if (!(is_half_tensor(arguments) || ...) || native(name)) {
    kernel(arguments...);
    return;
  }
  Widening widening(backend, reads_outputs(name));
  kernel(widening(arguments)...);
  widening.finish();
}

}  // namespace keras::float32_compute
