// What fused batch normalization computes per channel, written once for the CPU kernels
// (engine/cpu/batch_normalization.cpp) and the CUDA kernel bodies
// (engine/cuda/batch_normalization.h), as engine/line_rules.h is for lines.
//
// Statistics: each channel's sums of d = x - shift and d * d accumulate in double, with the
// channel's first element as the shift, so E[d^2] - E[d]^2 does not cancel when the mean is
// large against the spread (activations after a ReLU: mean and deviation alike; after a bias:
// not). One pass over x instead of two.
//
// Gradient of y = (x - mean) * inverse * scale + offset through the batch statistics, with
// n elements per channel, sum_g = sum(g) and centered = sum(g * (x - mean)):
//   dx = scale * inverse * (g - sum_g / n) - scale * inverse^3 * centered / n * (x - mean)
// the classic fused form (written in terms of x - mean, so a large mean does not cancel),
// and d scale = centered * inverse, d offset = sum_g.
#pragma once
#include <cstdint>

#include "engine/host_device.h"

namespace keras::batch_normalization_rules {

// Mean and (biased) variance from the shifted sums; a variance rounded below zero is zero,
// NaN stays NaN; no elements give NaN for both, as NumPy's mean of nothing does.
KERAS_HOST_DEVICE inline void statistics(double shift, double sum, double sum_of_squares,
                                         std::int64_t count, double& mean, double& variance) {
  const double n = static_cast<double>(count);
  const double mean_shifted = sum / n;
  mean = shift + mean_shifted;
  variance = sum_of_squares / n - mean_shifted * mean_shifted;
  if (variance < 0) variance = 0;
}

// dx = gradient_scale * (g - gradient_mean) - slope * (x - mean), per channel.
struct InputGradientTerms {
  double gradient_scale, gradient_mean, slope;
};

KERAS_HOST_DEVICE inline InputGradientTerms input_gradient_terms(double scale, double inverse,
                                                                 double sum_gradient,
                                                                 double centered,
                                                                 std::int64_t count) {
  const double n = static_cast<double>(count);
  const double gradient_scale = scale * inverse;
  return {gradient_scale, sum_gradient / n, gradient_scale * inverse * inverse * centered / n};
}

}  // namespace keras::batch_normalization_rules
