// GPU fused batch normalization (engine/kernel_list.h) over x viewed as [outer, channels,
// inner], with the per-channel rules of engine/batch_normalization_rules.h (shared with the
// CPU). The channel sums run in two passes with no atomics, as engine/cuda/reduce.h's do, so
// they do not depend on the launch shape: each thread folds kReduceChunk elements of one
// channel in double, then one thread per channel folds its chunks in order. The element-wise
// passes take one thread per element. 16-bit tensors arrive as float32 copies
// (engine/float32_compute.h); a kernel reading them as they are waits for a GPU to measure it.
#pragma once

#include "engine/batch_normalization_rules.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/reduce.h"

namespace keras::gpu_kernels {

struct ChannelGeometry {
  std::int64_t channels, inner, per_channel, chunks;
  // The flat index of element m (in [0, per_channel)) of channel c.
  KERAS_HOST_DEVICE std::int64_t index(std::int64_t c, std::int64_t m) const {
    return ((m / inner) * channels + c) * inner + m % inner;
  }
  KERAS_HOST_DEVICE std::int64_t channel_of(std::int64_t flat) const { return (flat / inner) % channels; }
};

inline ChannelGeometry channel_geometry(const Shape& shape, int axis) {
  const AxisLines lines = lines_along(shape, axis);
  const std::int64_t per_channel = lines.outer * lines.inner;
  return {lines.length, lines.inner, per_channel, (per_channel + kReduceChunk - 1) / kReduceChunk};
}

// partial[(c * chunks + chunk) * 2 + {0, 1}] = the chunk's sums of the two terms
// terms(c, at, first, second) gives for the element at flat index `at` of channel c.
template <typename Terms>
struct ChannelSumsChunkBody {
  Terms terms;
  double* partial;
  ChannelGeometry geometry;
  KERAS_HOST_DEVICE void operator()(std::int64_t flat) const {
    const std::int64_t c = flat / geometry.chunks, chunk = flat % geometry.chunks;
    const std::int64_t begin = chunk * kReduceChunk;
    const std::int64_t end = begin + kReduceChunk < geometry.per_channel ? begin + kReduceChunk : geometry.per_channel;
    double first = 0, second = 0;
    for (std::int64_t m = begin; m < end; ++m) terms(c, geometry.index(c, m), first, second);
    partial[flat * 2] = first;
    partial[flat * 2 + 1] = second;
  }
};

// Channel c's two sums, its chunks folded in order.
KERAS_HOST_DEVICE inline void fold_chunks(const double* partial, std::int64_t c, std::int64_t chunks, double& first,
                                          double& second) {
  first = 0;
  second = 0;
  for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
    first += partial[(c * chunks + chunk) * 2];
    second += partial[(c * chunks + chunk) * 2 + 1];
  }
}

// x - shift and its square, the shift being the channel's first element.
template <typename T>
struct ShiftedTerms {
  const T* x;
  ChannelGeometry geometry;
  KERAS_HOST_DEVICE void operator()(std::int64_t c, std::int64_t at, double& sum, double& squares) const {
    const double d = static_cast<double>(x[at]) - static_cast<double>(x[geometry.index(c, 0)]);
    sum += d;
    squares += d * d;
  }
};

template <typename T>
struct StatisticsFinishBody {
  const T* x;
  const double* partial;
  T* mean;
  T* variance;
  ChannelGeometry geometry;
  KERAS_HOST_DEVICE void operator()(std::int64_t c) const {
    double sum = 0, squares = 0;
    fold_chunks(partial, c, geometry.chunks, sum, squares);
    const double shift = geometry.per_channel > 0 ? static_cast<double>(x[geometry.index(c, 0)]) : 0.0;
    double channel_mean = 0, channel_variance = 0;
    batch_normalization_rules::statistics(shift, sum, squares, geometry.per_channel, channel_mean, channel_variance);
    mean[c] = static_cast<T>(channel_mean);
    variance[c] = static_cast<T>(channel_variance);
  }
};

template <class Launcher>
void batch_normalization_statistics(Launcher& launcher, const Tensor& x, int axis, Tensor& mean, Tensor& variance) {
  const ChannelGeometry geometry = channel_geometry(x.shape(), axis);
  if (geometry.channels == 0) return;
  dispatch_floating(x.dtype(), "batch normalization statistics", [&](auto zero) {
    using T = decltype(zero);
    Tensor partial = Tensor::empty({geometry.channels * geometry.chunks * 2}, DType::float64, x.device());
    auto* partial_data = static_cast<double*>(partial.raw_data());
    if (geometry.chunks > 0) {
      launcher.for_each(geometry.channels * geometry.chunks,
                        ChannelSumsChunkBody<ShiftedTerms<T>>{{elements_of<T>(x), geometry}, partial_data, geometry});
    }
    launcher.for_each(geometry.channels, StatisticsFinishBody<T>{elements_of<T>(x), partial_data,
                                                                 elements_of<T>(mean), elements_of<T>(variance),
                                                                 geometry});
  });
}

template <typename T>
struct ChannelAffineBody {
  const T* x;
  const T* multiplier;
  const T* offset;
  T* out;
  ChannelGeometry geometry;
  KERAS_HOST_DEVICE void operator()(std::int64_t flat) const {
    const std::int64_t c = geometry.channel_of(flat);
    out[flat] = x[flat] * multiplier[c] + offset[c];
  }
};

template <class Launcher>
void channel_affine(Launcher& launcher, const Tensor& x, const Tensor& multiplier, const Tensor& offset,
                    int axis, Tensor& out) {
  const ChannelGeometry geometry = channel_geometry(x.shape(), axis);
  if (x.size() == 0) return;
  dispatch_floating(x.dtype(), "channel affine", [&](auto zero) {
    using T = decltype(zero);
    launcher.for_each(x.size(), ChannelAffineBody<T>{elements_of<T>(x), elements_of<T>(multiplier),
                                                     elements_of<T>(offset), elements_of<T>(out), geometry});
  });
}

// g and g * (x - mean).
template <typename T>
struct GradientTerms {
  const T* x;
  const T* gradient;
  const T* mean;
  KERAS_HOST_DEVICE void operator()(std::int64_t c, std::int64_t at, double& sum, double& centered) const {
    const double g = static_cast<double>(gradient[at]);
    sum += g;
    centered += g * (static_cast<double>(x[at]) - static_cast<double>(mean[c]));
  }
};

// Folds one channel's chunks into its sums and its input-gradient terms (3 doubles).
template <typename T>
struct GradientFinishBody {
  const double* partial;
  const T* inverse;
  const T* scale;
  T* gradient_sum;
  T* centered_gradient_sum;
  double* terms;
  ChannelGeometry geometry;
  KERAS_HOST_DEVICE void operator()(std::int64_t c) const {
    double sum = 0, centered = 0;
    fold_chunks(partial, c, geometry.chunks, sum, centered);
    gradient_sum[c] = static_cast<T>(sum);
    centered_gradient_sum[c] = static_cast<T>(centered);
    const batch_normalization_rules::InputGradientTerms channel_terms = batch_normalization_rules::input_gradient_terms(
        static_cast<double>(scale[c]), static_cast<double>(inverse[c]), sum, centered, geometry.per_channel);
    terms[c * 3] = channel_terms.gradient_scale;
    terms[c * 3 + 1] = channel_terms.gradient_mean;
    terms[c * 3 + 2] = channel_terms.slope;
  }
};

template <typename T>
struct InputGradientBody {
  const T* x;
  const T* gradient;
  const T* mean;
  const double* terms;
  T* input_gradient;
  ChannelGeometry geometry;
  KERAS_HOST_DEVICE void operator()(std::int64_t flat) const {
    const std::int64_t c = geometry.channel_of(flat);
    const T gradient_scale = static_cast<T>(terms[c * 3]), gradient_mean = static_cast<T>(terms[c * 3 + 1]);
    const T slope = static_cast<T>(terms[c * 3 + 2]);
    input_gradient[flat] = gradient_scale * (gradient[flat] - gradient_mean) - slope * (x[flat] - mean[c]);
  }
};

template <class Launcher>
void batch_normalization_gradient(Launcher& launcher, const Tensor& x, const Tensor& output_gradient,
                                  const Tensor& mean, const Tensor& inverse, const Tensor& scale, int axis,
                                  Tensor& input_gradient, Tensor& gradient_sum, Tensor& centered_gradient_sum) {
  const ChannelGeometry geometry = channel_geometry(x.shape(), axis);
  if (geometry.channels == 0) return;
  dispatch_floating(x.dtype(), "batch normalization gradient", [&](auto zero) {
    using T = decltype(zero);
    Tensor partial = Tensor::empty({geometry.channels * geometry.chunks * 2}, DType::float64, x.device());
    Tensor terms = Tensor::empty({geometry.channels * 3}, DType::float64, x.device());
    auto* partial_data = static_cast<double*>(partial.raw_data());
    auto* terms_data = static_cast<double*>(terms.raw_data());
    if (geometry.chunks > 0) {
      launcher.for_each(geometry.channels * geometry.chunks,
                        ChannelSumsChunkBody<GradientTerms<T>>{
                            {elements_of<T>(x), elements_of<T>(output_gradient), elements_of<T>(mean)},
                            partial_data, geometry});
    }
    launcher.for_each(geometry.channels,
                      GradientFinishBody<T>{partial_data, elements_of<T>(inverse), elements_of<T>(scale),
                                            elements_of<T>(gradient_sum), elements_of<T>(centered_gradient_sum),
                                            terms_data, geometry});
    if (x.size() > 0) {
      launcher.for_each(x.size(), InputGradientBody<T>{elements_of<T>(x), elements_of<T>(output_gradient),
                                                       elements_of<T>(mean), terms_data,
                                                       elements_of<T>(input_gradient), geometry});
    }
  });
}

}  // namespace keras::gpu_kernels
