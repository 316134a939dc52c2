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

// The sum in double of term(0) + ... + term(length - 1), in kSumLanes interleaved partial
// sums added in a fixed order at the end: the same result on every thread count and backend,
// and the CPU vectorises it. One running double sum is a chain of dependent adds (4 cycles an
// element): softmax over 16x4x128x128 scores took 2.8 ms on one Xeon core with it.
constexpr int kSumLanes = 8;
template <typename Term>
KERAS_HOST_DEVICE double lane_sum(std::int64_t length, Term term) {
  double lanes[kSumLanes] = {};
  std::int64_t k = 0;
  for (; k + kSumLanes <= length; k += kSumLanes) {
    for (int j = 0; j < kSumLanes; ++j) lanes[j] += term(k + j);
  }
  for (int j = 0; k < length; ++k, ++j) lanes[j] += term(k);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// The largest element of a line, in kSumLanes interleaved running maxima, each starting from
// the first element: a NaN is skipped unless it is the first element, as with one running
// maximum (and any NaN in the line makes softmax's sum NaN anyway).
template <typename T>
KERAS_HOST_DEVICE T line_maximum(const T* in, std::int64_t length, std::int64_t stride) {
  T lanes[kSumLanes];
  for (int j = 0; j < kSumLanes; ++j) lanes[j] = in[0];
  std::int64_t k = 0;
  for (; k + kSumLanes <= length; k += kSumLanes) {
    for (int j = 0; j < kSumLanes; ++j) {
      T value = in[(k + j) * stride];
      lanes[j] = value > lanes[j] ? value : lanes[j];
    }
  }
  for (; k < length; ++k) {
    T value = in[k * stride];
    lanes[0] = value > lanes[0] ? value : lanes[0];
  }
  T largest = lanes[0];
  for (int j = 1; j < kSumLanes; ++j) largest = lanes[j] > largest ? lanes[j] : largest;
  return largest;
}

// out = softmax(in) or log_softmax(in) along the line.
template <typename T>
KERAS_HOST_DEVICE void softmax(const T* in, T* out, std::int64_t length, std::int64_t stride,
                               bool log) {
  const T largest = line_maximum(in, length, stride);
  // The exponentials in a loop of their own, apart from the sum in double, so that the CPU
  // vectorises them (scalar::vectorizable_exp): with glibc's expf one at a time, and its slow
  // path for the causal mask's -inf, softmax's exp took 3.7% of the mixed_bfloat16 transformer
  // step (perf, 1 thread).
  for (std::int64_t k = 0; k < length; ++k) {
    T shifted = in[k * stride] - largest;
    out[k * stride] = log ? shifted : scalar::vectorizable_exp(shifted);
  }
  const double total = log ? lane_sum(length, [&](std::int64_t k) { return static_cast<double>(scalar::vectorizable_exp(out[k * stride])); })
                           : lane_sum(length, [&](std::int64_t k) { return static_cast<double>(out[k * stride]); });
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
  const double total = log ? lane_sum(length, [&](std::int64_t k) { return static_cast<double>(dy[k * stride]); })
                           : lane_sum(length, [&](std::int64_t k) { return static_cast<double>(dy[k * stride] * y[k * stride]); });
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
  const double mean = lane_sum(length, [&](std::int64_t k) { return static_cast<double>(in[k]); }) /
                      static_cast<double>(length);
  const double squares = lane_sum(length, [&](std::int64_t k) {
    const double d = static_cast<double>(in[k]) - mean;
    return d * d;
  });
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
  const double gradient_total = lane_sum(length, [&](std::int64_t k) { return static_cast<double>(dy[k] * gamma[k]); });
  const double projected_total = lane_sum(length, [&](std::int64_t k) {
    return static_cast<double>(dy[k] * gamma[k]) * static_cast<double>((in[k] - mean) * inverse);
  });
  const T gradient_mean = static_cast<T>(gradient_total / static_cast<double>(length));
  const T projected_mean = static_cast<T>(projected_total / static_cast<double>(length));
  for (std::int64_t k = 0; k < length; ++k) {
    const T normalized = (in[k] - mean) * inverse;
    dx[k] = inverse * (dy[k] * gamma[k] - gradient_mean - normalized * projected_mean);
  }
}

}  // namespace keras::line
