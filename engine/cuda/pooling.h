// GPU max and average pooling and their input gradients: one thread per output (or input)
// element, each by engine/window_rules.h (shared with the CPU). The gradient gathers over the
// windows that cover an input element instead of scattering from each window, so it needs no
// atomics; max pooling re-finds each window's selected element rather than storing indices.
#pragma once
#include "engine/cuda/kernels.h"
#include "engine/window_rules.h"

namespace keras::gpu_kernels {

template <typename T>
struct PoolBody {
  const T* input;
  T* out;
  WindowGeometry geometry;
  bool max;
  KERAS_HOST_DEVICE void operator()(std::int64_t e) const {
    out[e] = window::pool_element(max, input, geometry, e);
  }
};

template <typename T>
struct PoolGradientBody {
  const T* input;
  const T* output_gradient;
  T* input_gradient;
  WindowGeometry geometry;
  bool max;
  KERAS_HOST_DEVICE void operator()(std::int64_t e) const {
    input_gradient[e] = window::pool_gradient_element(max, input, output_gradient, geometry, e);
  }
};

template <class Launcher>
void pool(Launcher& launcher, PoolOp op, const Tensor& input, const WindowGeometry& geometry,
          Tensor& out) {
  dispatch_floating(input.dtype(), "pooling", [&](auto zero) {
    using T = decltype(zero);
    launcher.for_each(out.size(), PoolBody<T>{elements_of<T>(input), elements_of<T>(out),
                                               geometry, op == PoolOp::max});
  });
}

template <class Launcher>
void pool_gradient(Launcher& launcher, PoolOp op, const Tensor& input,
                   const Tensor& output_gradient, const WindowGeometry& geometry,
                   Tensor& input_gradient) {
  dispatch_floating(input.dtype(), "pooling gradient", [&](auto zero) {
    using T = decltype(zero);
    launcher.for_each(input_gradient.size(),
                      PoolGradientBody<T>{elements_of<T>(input), elements_of<T>(output_gradient),
                                          elements_of<T>(input_gradient), geometry,
                                          op == PoolOp::max});
  });
}

}  // namespace keras::gpu_kernels
