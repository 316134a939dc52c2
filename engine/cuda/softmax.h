// GPU softmax and log_softmax over one axis, viewed as [outer, axis, inner], and their
// gradients: one thread per line, each by engine/line_rules.h (shared with the CPU).
// One thread per line suits the classifier heads this engine trains (10-1000 classes); a
// block-per-line kernel for long axes is left until a GPU is at hand to measure it.
#pragma once
#include <cmath>

#include "engine/cuda/kernels.h"
#include "engine/cuda/layout.h"
#include "engine/line_rules.h"

namespace keras::gpu_kernels {

template <typename T>
struct SoftmaxBody {
  const T* in;
  T* out;
  std::int64_t length, inner;
  bool log;
  KERAS_HOST_DEVICE void operator()(std::int64_t line) const {
    std::int64_t o = line / inner, i = line % inner;
    std::int64_t base = o * length * inner + i;
    line::softmax(in + base, out + base, length, inner, log);
  }
};

template <typename T>
struct SoftmaxGradientBody {
  const T* y;
  const T* dy;
  T* dx;
  std::int64_t length, inner;
  bool log;
  KERAS_HOST_DEVICE void operator()(std::int64_t line) const {
    std::int64_t o = line / inner, i = line % inner;
    std::int64_t base = o * length * inner + i;
    line::softmax_gradient(y + base, dy + base, dx + base, length, inner, log);
  }
};

template <class Launcher>
void softmax(Launcher& launcher, const Tensor& x, int axis, bool log, Tensor& out) {
  AxisLines split = lines_along(x.shape(), axis);
  if (split.length == 0) return;
  dispatch_floating(x.dtype(), "softmax", [&](auto zero) {
    using T = decltype(zero);
    launcher.for_each(split.outer * split.inner,
                      SoftmaxBody<T>{static_cast<const T*>(x.raw_data()),
                                     static_cast<T*>(out.raw_data()), split.length, split.inner,
                                     log});
  });
}

template <class Launcher>
void softmax_gradient(Launcher& launcher, const Tensor& y, const Tensor& output_gradient,
                      int axis, bool log, Tensor& input_gradient) {
  AxisLines split = lines_along(y.shape(), axis);
  if (split.length == 0) return;
  dispatch_floating(y.dtype(), "softmax gradient", [&](auto zero) {
    using T = decltype(zero);
    launcher.for_each(split.outer * split.inner,
                      SoftmaxGradientBody<T>{static_cast<const T*>(y.raw_data()),
                                             static_cast<const T*>(output_gradient.raw_data()),
                                             static_cast<T*>(input_gradient.raw_data()),
                                             split.length, split.inner, log});
  });
}

}  // namespace keras::gpu_kernels
