// GPU layer normalization over the last axis (engine/kernel_list.h): one thread per line, each
// by engine/line_rules.h (shared with the CPU), and gamma's and beta's gradients as column sums
// over the lines in two passes with no atomics, as engine/cuda/reduce.h's (each thread folds
// kReduceChunk lines of one column in double, then one thread per column folds its chunks in
// order). One thread per line suits the widths this engine trains (64 to 1024 features); a
// block-per-line kernel waits for a GPU to measure it. 16-bit tensors arrive as float32 copies
// (engine/float32_compute.h).
#pragma once

#include "engine/cuda/batch_normalization.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/reduce.h"
#include "engine/line_rules.h"

namespace keras::gpu_kernels {

template <typename T>
struct LayerNormalizationBody {
  const T* x;
  const T* gamma;
  const T* beta;
  T* out;
  T* mean;
  T* inverse;
  double epsilon;
  std::int64_t length;
  KERAS_HOST_DEVICE void operator()(std::int64_t line) const {
    line::layer_normalization(x + line * length, out + line * length, length, gamma, beta, epsilon, mean[line],
                              inverse[line]);
  }
};

template <class Launcher>
void layer_normalization(Launcher& launcher, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                         double epsilon, Tensor& out, Tensor& mean, Tensor& inverse) {
  const std::int64_t length = x.shape().empty() ? 1 : x.shape().back();
  const std::int64_t lines = length == 0 ? mean.size() : x.size() / length;
  if (lines == 0) return;
  dispatch_floating(x.dtype(), "layer normalization", [&](auto zero) {
    using T = decltype(zero);
    launcher.for_each(lines, LayerNormalizationBody<T>{elements_of<T>(x), elements_of<T>(gamma), elements_of<T>(beta),
                                                       elements_of<T>(out), elements_of<T>(mean),
                                                       elements_of<T>(inverse), epsilon, length});
  });
}

template <typename T>
struct LayerNormalizationGradientBody {
  const T* x;
  const T* gradient;
  const T* mean;
  const T* inverse;
  const T* gamma;
  T* input_gradient;
  std::int64_t length;
  KERAS_HOST_DEVICE void operator()(std::int64_t line) const {
    line::layer_normalization_gradient(x + line * length, gradient + line * length, input_gradient + line * length,
                                       length, gamma, mean[line], inverse[line]);
  }
};

// partial[(k * chunks + chunk) * 2 + {0, 1}] = over a chunk of lines, the sums of
// dy * (x - mean) * inverse and of dy in column k.
template <typename T>
struct ColumnSumsChunkBody {
  const T* x;
  const T* gradient;
  const T* mean;
  const T* inverse;
  double* partial;
  std::int64_t lines, length, chunks;
  KERAS_HOST_DEVICE void operator()(std::int64_t flat) const {
    const std::int64_t k = flat / chunks, chunk = flat % chunks;
    const std::int64_t begin = chunk * kReduceChunk;
    const std::int64_t end = begin + kReduceChunk < lines ? begin + kReduceChunk : lines;
    double scaled = 0, plain = 0;
    for (std::int64_t line = begin; line < end; ++line) {
      const double g = static_cast<double>(gradient[line * length + k]);
      scaled += g * static_cast<double>((x[line * length + k] - mean[line]) * inverse[line]);
      plain += g;
    }
    partial[flat * 2] = scaled;
    partial[flat * 2 + 1] = plain;
  }
};

template <typename T>
struct ColumnSumsFinishBody {
  const double* partial;
  T* gamma_gradient;
  T* beta_gradient;
  std::int64_t chunks;
  KERAS_HOST_DEVICE void operator()(std::int64_t k) const {
    double scaled = 0, plain = 0;
    fold_chunks(partial, k, chunks, scaled, plain);
    gamma_gradient[k] = static_cast<T>(scaled);
    beta_gradient[k] = static_cast<T>(plain);
  }
};

template <class Launcher>
void layer_normalization_gradient(Launcher& launcher, const Tensor& x, const Tensor& output_gradient,
                                  const Tensor& mean, const Tensor& inverse, const Tensor& gamma,
                                  Tensor& input_gradient, Tensor& gamma_gradient, Tensor& beta_gradient) {
  const std::int64_t length = x.shape().empty() ? 1 : x.shape().back();
  if (length == 0) return;
  const std::int64_t lines = x.size() / length;
  dispatch_floating(x.dtype(), "layer normalization gradient", [&](auto zero) {
    using T = decltype(zero);
    if (lines == 0) {
      fill(launcher, gamma_gradient, 0.0);
      fill(launcher, beta_gradient, 0.0);
      return;
    }
    launcher.for_each(lines, LayerNormalizationGradientBody<T>{
                                 elements_of<T>(x), elements_of<T>(output_gradient), elements_of<T>(mean),
                                 elements_of<T>(inverse), elements_of<T>(gamma), elements_of<T>(input_gradient),
                                 length});
    const std::int64_t chunks = (lines + kReduceChunk - 1) / kReduceChunk;
    Tensor partial = Tensor::empty({length * chunks * 2}, DType::float64, x.device());
    auto* partial_data = static_cast<double*>(partial.raw_data());
    launcher.for_each(length * chunks,
                      ColumnSumsChunkBody<T>{elements_of<T>(x), elements_of<T>(output_gradient), elements_of<T>(mean),
                                             elements_of<T>(inverse), partial_data, lines, length, chunks});
    launcher.for_each(length, ColumnSumsFinishBody<T>{partial_data, elements_of<T>(gamma_gradient),
                                                      elements_of<T>(beta_gradient), chunks});
  });
}

}  // namespace keras::gpu_kernels
