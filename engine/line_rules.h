// What an op computes along one line of an axis (elements `stride` apart), written once for
// the CPU kernels and the CUDA kernel bodies (KERAS_HOST_DEVICE), as engine/scalar_rules.h is
// for one element: argmax/argmin with NumPy's NaN rule, and softmax, log_softmax and their
// gradients with the max subtracted for stability and the sum in double.
#pragma once
#include <cmath>
#include <cstdint>

#include "engine/host_device.h"
#include "engine/scalar_rules.h"

namespace keras::line {

// Index of the largest (or smallest) element; NumPy: the first NaN wins, as NaN is both the
// maximum and the minimum.
template <typename T>
KERAS_HOST_DEVICE std::int64_t arg_reduce(const T* base, std::int64_t length, std::int64_t stride,
                                          bool largest) {
  std::int64_t best = 0;
  for (std::int64_t r = 1; r < length && !scalar::is_nan(base[best * stride]); ++r) {
    T value = base[r * stride];
    T current = base[best * stride];
    if (scalar::is_nan(value) || (largest ? value > current : value < current)) best = r;
  }
  return best;
}

// out = softmax(in) or log_softmax(in) along the line.
template <typename T>
KERAS_HOST_DEVICE void softmax(const T* in, T* out, std::int64_t length, std::int64_t stride,
                               bool log) {
  T largest = in[0];
  for (std::int64_t k = 1; k < length; ++k) {
    T value = in[k * stride];
    largest = value > largest ? value : largest;
  }
  // The exponentials in a loop of their own, apart from the sum in double, so that the CPU
  // vectorises them (scalar::vectorizable_exp): with glibc's expf one at a time, and its slow
  // path for the causal mask's -inf, softmax's exp took 3.7% of the mixed_bfloat16 transformer
  // step (perf, 1 thread).
  for (std::int64_t k = 0; k < length; ++k) {
    T shifted = in[k * stride] - largest;
    out[k * stride] = log ? shifted : scalar::vectorizable_exp(shifted);
  }
  double total = 0;
  for (std::int64_t k = 0; k < length; ++k) {
    T value = out[k * stride];
    total += log ? scalar::vectorizable_exp(value) : value;
  }
  if (log) {
    T log_total = static_cast<T>(std::log(total));
    for (std::int64_t k = 0; k < length; ++k) out[k * stride] -= log_total;
  } else {
    T scale = static_cast<T>(1.0 / total);
    for (std::int64_t k = 0; k < length; ++k) out[k * stride] *= scale;
  }
}

// The input gradient from the saved output y:
//   softmax:     dx = y * (dy - sum(dy * y))
//   log_softmax: dx = dy - exp(y) * sum(dy)
template <typename T>
KERAS_HOST_DEVICE void softmax_gradient(const T* y, const T* dy, T* dx, std::int64_t length,
                                        std::int64_t stride, bool log) {
  double total = 0;
  for (std::int64_t k = 0; k < length; ++k) {
    std::int64_t at = k * stride;
    total += log ? dy[at] : dy[at] * y[at];
  }
  T t = static_cast<T>(total);
  for (std::int64_t k = 0; k < length; ++k) {
    std::int64_t at = k * stride;
    dx[at] = log ? dy[at] - scalar::vectorizable_exp(y[at]) * t : y[at] * (dy[at] - t);
  }
}

}  // namespace keras::line
