// GPU softmax and log_softmax over one axis, viewed as [outer, axis, inner], one thread per
// line (the max subtracted for stability, the sum in double), and their gradients from the
// saved output y:  softmax: dx = y * (dy - sum(dy * y));  log_softmax: dx = dy - exp(y) * sum(dy).
// One thread per line suits the classifier heads this engine trains (10-1000 classes); a
// block-per-line kernel for long axes is left until a GPU is at hand to measure it.
#pragma once
#include <cmath>

#include "engine/cuda/kernels.h"
#include "engine/cuda/layout.h"

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
    T largest = in[base];
    for (std::int64_t k = 1; k < length; ++k) {
      T value = in[base + k * inner];
      largest = value > largest ? value : largest;  // std::max's rule, as the CPU kernel
    }
    double total = 0;
    for (std::int64_t k = 0; k < length; ++k) {
      T shifted = in[base + k * inner] - largest;
      T e = std::exp(shifted);
      total += e;
      out[base + k * inner] = log ? shifted : e;
    }
    if (log) {
      T log_total = static_cast<T>(std::log(total));
      for (std::int64_t k = 0; k < length; ++k) out[base + k * inner] -= log_total;
    } else {
      T scale = static_cast<T>(1.0 / total);
      for (std::int64_t k = 0; k < length; ++k) out[base + k * inner] *= scale;
    }
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
    double total = 0;
    for (std::int64_t k = 0; k < length; ++k) {
      std::int64_t at = base + k * inner;
      total += log ? dy[at] : dy[at] * y[at];
    }
    T t = static_cast<T>(total);
    for (std::int64_t k = 0; k < length; ++k) {
      std::int64_t at = base + k * inner;
      dx[at] = log ? dy[at] - std::exp(y[at]) * t : y[at] * (dy[at] - t);
    }
  }
};

template <class Launcher>
void softmax(Launcher& launcher, const Tensor& x, int axis, bool log, Tensor& out) {
  AxisSplit split = split_at(x.shape(), axis);
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
  AxisSplit split = split_at(y.shape(), axis);
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
