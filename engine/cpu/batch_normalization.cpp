// CPU fused batch normalization (engine/kernel_list.h): the statistics, the per-channel affine
// map and the gradient, each one or two passes over x viewed as [outer, channels, inner].
// bfloat16 and float16 are read as they are and each result rounded once (a block at a time
// beside the thread), instead of float32 copies of the whole tensor (engine/float32_compute.h):
// bfloat16 widened in registers inside the loops, float16 a block at a time into a buffer
// (engine/cpu/half_conversion.h, readable_values). With the reads in the loops, bfloat16's half
// the bytes pay: BatchNormalization+ReLU forward and backward at the guide convnet's first
// layer (128x28x28x12), 1 thread, 2.44 ms in bfloat16 against 2.82 in float32, where a
// widening pass first made it 3.0 (dtype_ops_benchmark, medians of 5). The composed form it
// replaces in BatchNormalization made about eight passes forward and a dozen backward, plus
// four conversion passes under a 16-bit policy (docs/ARCHITECTURE.md, "Fused batch
// normalization").
//
// Sums run over blocks of whole rows in a fixed order and accumulate in double, so a result does
// not depend on the thread count.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "engine/batch_normalization_rules.h"
#include "engine/cpu/half_conversion.h"
#include "engine/cpu/kernels.h"
#include "engine/errors.h"
#include "engine/thread_pool.h"

namespace keras::cpu {
namespace {

namespace rules = batch_normalization_rules;

// Elements per block: 32 KiB of float32, which a thread's widened copy and result keep in L2.
constexpr std::int64_t kBlockElements = 8192;

// Channels-last rows (inner = 1) are walked a span at a time: `span` elements, whole rows and a
// multiple of 16, whose element j belongs to channel j % channels. Per-channel values repeated
// over a span ("lanes") make every inner loop one contiguous run of 48 elements for the guide
// convnet's 12 channels (GCC's -fopt-info-vec reports each loop vectorised), where a loop over
// one row's channels runs 12. The kernels are memory-bound either way on the Xeon VM
// (docs/ARCHITECTURE.md, "Fused batch normalization").
struct ChannelView {
  std::int64_t outer = 1, channels = 1, inner = 1;
  std::int64_t span = 1;  // for inner = 1
  std::int64_t rows_per_block = 1, blocks = 0;
  std::int64_t per_channel() const { return outer * inner; }
  std::int64_t row_elements() const { return channels * inner; }
  std::int64_t rows_in(std::int64_t block) const {
    return std::min(rows_per_block, outer - block * rows_per_block);
  }
};

ChannelView channel_view(const Shape& shape, int axis) {
  const AxisLines lines = lines_along(shape, axis);
  ChannelView view;
  view.outer = lines.outer;
  view.channels = lines.length;
  view.inner = lines.inner;
  const std::int64_t row = std::max<std::int64_t>(1, view.row_elements());
  // Rows per span: 16 / gcd(channels, 16), so that a span is a multiple of 16 elements.
  std::int64_t span_rows = 16;
  while (span_rows > 1 && view.channels % (16 / span_rows * 2) == 0) span_rows /= 2;
  view.span = span_rows * std::max<std::int64_t>(1, view.channels);
  // A block is whole spans (so every block starts at lane 0).
  view.rows_per_block = std::max<std::int64_t>(span_rows, kBlockElements / row / span_rows * span_rows);
  view.blocks = (view.outer + view.rows_per_block - 1) / view.rows_per_block;
  return view;
}

// Per-channel values repeated over a span: lane j holds channel j % channels's value.
template <typename T, typename Source>
std::vector<T> lanes_of(const ChannelView& view, const Source* per_channel) {
  std::vector<T> lanes(static_cast<std::size_t>(view.span));
  for (std::int64_t j = 0; j < view.span; ++j) lanes[static_cast<std::size_t>(j)] = static_cast<T>(per_channel[j % view.channels]);
  return lanes;
}

// Lanes summed at once by span_lane_sums: 16 doubles, four AVX2 registers a sum. A span is a
// multiple of 16 elements (channel_view), so the groups tile it.
constexpr std::int64_t kLaneGroup = 16;

// inner = 1: for each lane j of a span, two double sums over a block of `count` elements, span
// after span in order, of terms(index, j, first, second) (which sets the element's two terms),
// then added into per-channel sums (lane j into channel j % channels, lanes in order). That is
// the order of one running sum per lane, so the results are the same bit for bit whatever the
// walk; the walk takes 16 lanes down the whole block with their sums in registers. Kept in
// memory a span at a time, every element was a dependent load, add and store of its lane's sum:
// the statistics ran at 1.8 cycles an element on the Xeon VM, float32 from memory or 16-bit
// widened in cache alike (perf, dtype_ops_benchmark's BatchNormalizationRelu rows).
template <typename Terms>
void span_lane_sums(const ChannelView& view, std::int64_t count, Terms&& terms, double* first_per_channel,
                    double* second_per_channel) {
  const std::int64_t spans = count / view.span, tail = count % view.span;
  for (std::int64_t lane = 0; lane < view.span; lane += kLaneGroup) {
    double first[kLaneGroup] = {}, second[kLaneGroup] = {};
    for (std::int64_t s = 0; s < spans; ++s) {
      const std::int64_t at = s * view.span + lane;
      for (std::int64_t i = 0; i < kLaneGroup; ++i) terms(at + i, lane + i, first[i], second[i]);
    }
    // The block's last span is short when the block ends mid-span (it still starts at lane 0).
    for (std::int64_t i = 0; i < kLaneGroup && lane + i < tail; ++i) {
      terms(spans * view.span + lane + i, lane + i, first[i], second[i]);
    }
    for (std::int64_t i = 0; i < kLaneGroup; ++i) {
      first_per_channel[(lane + i) % view.channels] += first[i];
      second_per_channel[(lane + i) % view.channels] += second[i];
    }
  }
}

// inner = 1: calls run(offset, length) for each span of a block of `count` elements (the last
// one shorter when the block ends mid-span; it still starts at lane 0).
template <typename Run>
void for_each_span(const ChannelView& view, std::int64_t count, Run&& run) {
  for (std::int64_t offset = 0; offset < count; offset += view.span) run(offset, std::min(view.span, count - offset));
}

// inner > 1: calls run(offset, channel) for each run of `inner` elements of one channel.
template <typename Run>
void for_each_channel_run(const ChannelView& view, std::int64_t rows, Run&& run) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < view.channels; ++c) run((r * view.channels + c) * view.inner, c);
  }
}

// A per-channel tensor (statistics, multipliers, offsets) in the compute type, checked: the op
// makes them so.
template <typename Element>
const ComputeType<Element>* per_channel_values(const Tensor& values, const char* what) {
  constexpr DType expected = std::is_same_v<Element, double> ? DType::float64 : DType::float32;
  if (values.dtype() != expected) {
    throw DTypeError(str("batch normalization kernel: ", what, " is ", dtype_name(values.dtype()),
                         ", expected ", dtype_name(expected), " for ",
                         std::is_same_v<Element, double> ? "float64" : "float32 or 16-bit", " inputs"));
  }
  return elements_of<ComputeType<Element>>(values);
}

// A thread's buffers for widening a block's 16-bit operands, kept across its blocks (made per
// block, each one's zero-filled allocation was 4% of the 16-bit statistics and gradient).
struct WideningBuffers {
  std::vector<float> x, gradient, out;
};

// Per block, per channel, two double sums, which block_sums(block, buffers, first, second)
// writes, then the blocks' sums added in block order into `first` and `second` (channels each).
template <typename BlockSums>
void channel_sums(const ChannelView& view, BlockSums&& block_sums, std::vector<double>& first,
                  std::vector<double>& second) {
  const std::int64_t channels = view.channels;
  std::vector<double> partial(static_cast<std::size_t>(view.blocks * 2 * channels), 0.0);
  parallel_for(view.blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    WideningBuffers buffers;
    for (std::int64_t block = begin; block < end; ++block) {
      double* block_first = partial.data() + block * 2 * channels;
      double* block_second = block_first + channels;
      block_sums(block, buffers, block_first, block_second);
    }
  });
  first.assign(static_cast<std::size_t>(channels), 0.0);
  second.assign(static_cast<std::size_t>(channels), 0.0);
  for (std::int64_t block = 0; block < view.blocks; ++block) {
    const double* block_first = partial.data() + block * 2 * channels;
    for (std::int64_t c = 0; c < channels; ++c) {
      first[static_cast<std::size_t>(c)] += block_first[c];
      second[static_cast<std::size_t>(c)] += block_first[channels + c];
    }
  }
}

}  // namespace

void batch_normalization_statistics(const Tensor& x, int axis, Tensor& mean, Tensor& variance) {
  const ChannelView view = channel_view(x.shape(), axis);
  if (view.channels == 0) return;  // nothing to compute or write
  dispatch_floating_or_half(x.dtype(), "batch normalization statistics", [&](auto zero) {
    using Element = decltype(zero);
    using W = ComputeType<Element>;
    per_channel_values<Element>(mean, "the mean");
    per_channel_values<Element>(variance, "the variance");
    const Element* data = elements_of<Element>(x);
    const std::int64_t channels = view.channels, row = view.row_elements();
    std::vector<double> shift(static_cast<std::size_t>(channels), 0.0);
    if (view.per_channel() > 0) {
      for (std::int64_t c = 0; c < channels; ++c) {
        shift[static_cast<std::size_t>(c)] = static_cast<double>(static_cast<W>(data[c * view.inner]));
      }
    }
    const std::vector<double> shift_lanes = lanes_of<double>(view, shift.data());
    std::vector<double> sum, sum_of_squares;
    channel_sums(
        view,
        [&](std::int64_t block, WideningBuffers& buffers, double* block_sum, double* block_squares) {
          const std::int64_t rows = view.rows_in(block), count = rows * row;
          const auto* values = readable_values(data + block * view.rows_per_block * row, count, buffers.x);
          if (view.inner == 1) {
            const double* shifts = shift_lanes.data();
            span_lane_sums(
                view, count,
                [&](std::int64_t at, std::int64_t lane, double& lane_sum, double& lane_squares) {
                  const double d = static_cast<double>(static_cast<W>(values[at])) - shifts[lane];
                  lane_sum += d;
                  lane_squares += d * d;
                },
                block_sum, block_squares);
            return;
          }
          for_each_channel_run(view, rows, [&](std::int64_t offset, std::int64_t c) {
            const double channel_shift = shift[static_cast<std::size_t>(c)];
            double run_sum = 0, run_squares = 0;
            for (std::int64_t i = 0; i < view.inner; ++i) {
              const double d = static_cast<double>(static_cast<W>(values[offset + i])) - channel_shift;
              run_sum += d;
              run_squares += d * d;
            }
            block_sum[c] += run_sum;
            block_squares[c] += run_squares;
          });
        },
        sum, sum_of_squares);
    W* mean_out = elements_of<W>(mean);
    W* variance_out = elements_of<W>(variance);
    for (std::int64_t c = 0; c < channels; ++c) {
      const auto k = static_cast<std::size_t>(c);
      double channel_mean = 0, channel_variance = 0;
      rules::statistics(shift[k], sum[k], sum_of_squares[k], view.per_channel(), channel_mean, channel_variance);
      mean_out[c] = static_cast<W>(channel_mean);
      variance_out[c] = static_cast<W>(channel_variance);
    }
  });
}

void channel_affine(const Tensor& x, const Tensor& multiplier, const Tensor& offset, int axis, Tensor& out) {
  const ChannelView view = channel_view(x.shape(), axis);
  if (view.channels == 0) return;  // nothing to compute or write
  dispatch_floating_or_half(x.dtype(), "channel affine", [&](auto zero) {
    using Element = decltype(zero);
    using W = ComputeType<Element>;
    const W* scale = per_channel_values<Element>(multiplier, "the multiplier");
    const W* shift = per_channel_values<Element>(offset, "the offset");
    const std::vector<W> scale_lanes = lanes_of<W>(view, scale), shift_lanes = lanes_of<W>(view, shift);
    const Element* data = elements_of<Element>(x);
    Element* result = elements_of<Element>(out);
    const std::int64_t row = view.row_elements();
    parallel_for(view.blocks, 1, [&](std::int64_t begin, std::int64_t end) {
      WideningBuffers buffers;
      for (std::int64_t block = begin; block < end; ++block) {
        const std::int64_t count = view.rows_in(block) * row, start = block * view.rows_per_block * row;
        const auto* values = readable_values(data + start, count, buffers.x);
        write_from_compute_type(result + start, count, buffers.out, [&](W* destination) {
          if (view.inner == 1) {
            const W* scales = scale_lanes.data();
            const W* shifts = shift_lanes.data();
            for_each_span(view, count, [&](std::int64_t at, std::int64_t length) {
              const auto* in = values + at;
              W* to = destination + at;
              for (std::int64_t j = 0; j < length; ++j) to[j] = static_cast<W>(in[j]) * scales[j] + shifts[j];
            });
            return;
          }
          for_each_channel_run(view, view.rows_in(block), [&](std::int64_t at, std::int64_t c) {
            for (std::int64_t i = 0; i < view.inner; ++i) {
              destination[at + i] = static_cast<W>(values[at + i]) * scale[c] + shift[c];
            }
          });
        });
      }
    });
  });
}

void batch_normalization_gradient(const Tensor& x, const Tensor& output_gradient, const Tensor& mean,
                                  const Tensor& inverse, const Tensor& scale, int axis,
                                  Tensor& input_gradient, Tensor& gradient_sum,
                                  Tensor& centered_gradient_sum) {
  const ChannelView view = channel_view(x.shape(), axis);
  if (view.channels == 0) return;  // nothing to compute or write
  dispatch_floating_or_half(x.dtype(), "batch normalization gradient", [&](auto zero) {
    using Element = decltype(zero);
    using W = ComputeType<Element>;
    if (output_gradient.dtype() != x.dtype()) {
      throw DTypeError(str("batch normalization gradient: the output gradient is ",
                           dtype_name(output_gradient.dtype()), ", expected x's ", dtype_name(x.dtype())));
    }
    const W* means = per_channel_values<Element>(mean, "the mean");
    const W* inverses = per_channel_values<Element>(inverse, "the inverse deviation");
    const W* scales = per_channel_values<Element>(scale, "the scale");
    per_channel_values<Element>(gradient_sum, "the gradient sum");
    per_channel_values<Element>(centered_gradient_sum, "the centered gradient sum");
    const Element* data = elements_of<Element>(x);
    const Element* gradient = elements_of<Element>(output_gradient);
    Element* result = elements_of<Element>(input_gradient);
    const std::int64_t channels = view.channels, row = view.row_elements();
    const std::vector<W> mean_lanes = lanes_of<W>(view, means);

    // Pass 1: per channel, sum(g) and sum(g * (x - mean)).
    std::vector<double> sum, centered;
    channel_sums(
        view,
        [&](std::int64_t block, WideningBuffers& buffers, double* block_sum, double* block_centered) {
          const std::int64_t rows = view.rows_in(block), count = rows * row;
          const std::int64_t start = block * view.rows_per_block * row;
          const auto* values = readable_values(data + start, count, buffers.x);
          const auto* gradients = readable_values(gradient + start, count, buffers.gradient);
          if (view.inner == 1) {
            const W* lane_means = mean_lanes.data();
            span_lane_sums(
                view, count,
                [&](std::int64_t at, std::int64_t lane, double& lane_sum, double& lane_centered) {
                  const double gradient_value = static_cast<double>(static_cast<W>(gradients[at]));
                  lane_sum += gradient_value;
                  lane_centered += gradient_value * (static_cast<double>(static_cast<W>(values[at])) -
                                                     static_cast<double>(lane_means[lane]));
                },
                block_sum, block_centered);
            return;
          }
          for_each_channel_run(view, rows, [&](std::int64_t offset, std::int64_t c) {
            const double channel_mean = static_cast<double>(means[c]);
            double run_sum = 0, run_centered = 0;
            for (std::int64_t i = 0; i < view.inner; ++i) {
              const double gradient_value = static_cast<double>(static_cast<W>(gradients[offset + i]));
              run_sum += gradient_value;
              run_centered += gradient_value * (static_cast<double>(static_cast<W>(values[offset + i])) - channel_mean);
            }
            block_sum[c] += run_sum;
            block_centered[c] += run_centered;
          });
        },
        sum, centered);

    // The per-channel terms of dx = gradient_scale * (g - gradient_mean) - slope * (x - mean).
    W* sum_out = elements_of<W>(gradient_sum);
    W* centered_out = elements_of<W>(centered_gradient_sum);
    std::vector<W> terms(static_cast<std::size_t>(3 * channels));
    W* gradient_scale = terms.data();
    W* gradient_mean = gradient_scale + channels;
    W* slope = gradient_mean + channels;
    for (std::int64_t c = 0; c < channels; ++c) {
      const auto k = static_cast<std::size_t>(c);
      sum_out[c] = static_cast<W>(sum[k]);
      centered_out[c] = static_cast<W>(centered[k]);
      const rules::InputGradientTerms channel_terms = rules::input_gradient_terms(
          static_cast<double>(scales[c]), static_cast<double>(inverses[c]), sum[k], centered[k], view.per_channel());
      gradient_scale[c] = static_cast<W>(channel_terms.gradient_scale);
      gradient_mean[c] = static_cast<W>(channel_terms.gradient_mean);
      slope[c] = static_cast<W>(channel_terms.slope);
    }
    const std::vector<W> scale_lanes = lanes_of<W>(view, gradient_scale);
    const std::vector<W> gradient_mean_lanes = lanes_of<W>(view, gradient_mean);
    const std::vector<W> slope_lanes = lanes_of<W>(view, slope);

    // Pass 2: dx.
    parallel_for(view.blocks, 1, [&](std::int64_t begin, std::int64_t end) {
      WideningBuffers buffers;
      for (std::int64_t block = begin; block < end; ++block) {
        const std::int64_t rows = view.rows_in(block), count = rows * row;
        const std::int64_t start = block * view.rows_per_block * row;
        const auto* values = readable_values(data + start, count, buffers.x);
        const auto* gradients = readable_values(gradient + start, count, buffers.gradient);
        write_from_compute_type(result + start, count, buffers.out, [&](W* destination) {
          if (view.inner == 1) {
            const W* a = scale_lanes.data();
            const W* b = gradient_mean_lanes.data();
            const W* k = slope_lanes.data();
            const W* m = mean_lanes.data();
            for_each_span(view, count, [&](std::int64_t at, std::int64_t length) {
              const auto* in = values + at;
              const auto* g = gradients + at;
              W* to = destination + at;
              for (std::int64_t j = 0; j < length; ++j) {
                to[j] = a[j] * (static_cast<W>(g[j]) - b[j]) - k[j] * (static_cast<W>(in[j]) - m[j]);
              }
            });
            return;
          }
          for_each_channel_run(view, rows, [&](std::int64_t at, std::int64_t c) {
            for (std::int64_t i = 0; i < view.inner; ++i) {
              destination[at + i] = gradient_scale[c] * (static_cast<W>(gradients[at + i]) - gradient_mean[c]) -
                                    slope[c] * (static_cast<W>(values[at + i]) - means[c]);
            }
          });
        });
      }
    });
  });
}

}  // namespace keras::cpu
