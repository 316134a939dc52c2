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

// Layer normalization of one contiguous line (the last axis): the mean and the biased variance
// accumulate in double, in two passes over the line (it is in cache for the second), then
// out = (x - mean) * inverse * gamma + beta with inverse = 1 / sqrt(variance + epsilon); the
// line's mean and inverse are kept for the gradient.
template <typename T>
KERAS_HOST_DEVICE void layer_normalization(const T* in, T* out, std::int64_t length, const T* gamma, const T* beta,
                                           double epsilon, T& mean_out, T& inverse_out) {
  double total = 0;
  for (std::int64_t k = 0; k < length; ++k) total += static_cast<double>(in[k]);
  const double mean = total / static_cast<double>(length);
  double squares = 0;
  for (std::int64_t k = 0; k < length; ++k) {
    const double d = static_cast<double>(in[k]) - mean;
    squares += d * d;
  }
  const T line_mean = static_cast<T>(mean);
  const T inverse = static_cast<T>(1.0 / std::sqrt(squares / static_cast<double>(length) + epsilon));
  for (std::int64_t k = 0; k < length; ++k) out[k] = (in[k] - line_mean) * inverse * gamma[k] + beta[k];
  mean_out = line_mean;
  inverse_out = inverse;
}

// Its input gradient through the line's statistics, with h = (x - mean) * inverse and
// gg = dy * gamma: dx = inverse * (gg - mean(gg) - h * mean(gg * h)).
template <typename T>
KERAS_HOST_DEVICE void layer_normalization_gradient(const T* in, const T* dy, T* dx, std::int64_t length,
                                                    const T* gamma, T mean, T inverse) {
  double gradient_total = 0, projected_total = 0;
  for (std::int64_t k = 0; k < length; ++k) {
    const double scaled = static_cast<double>(dy[k] * gamma[k]);
    gradient_total += scaled;
    projected_total += scaled * static_cast<double>((in[k] - mean) * inverse);
  }
  const T gradient_mean = static_cast<T>(gradient_total / static_cast<double>(length));
  const T projected_mean = static_cast<T>(projected_total / static_cast<double>(length));
  for (std::int64_t k = 0; k < length; ++k) {
    const T normalized = (in[k] - mean) * inverse;
    dx[k] = inverse * (dy[k] * gamma[k] - gradient_mean - normalized * projected_mean);
  }
}

}  // namespace keras::line
