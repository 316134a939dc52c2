// CPU fused batch normalization (engine/kernel_list.h): the statistics, the per-channel affine
// map and the gradient, each one or two passes over x viewed as [outer, channels, inner].
// bfloat16 and float16 are read as they are, a block at a time widened beside the thread and
// each result rounded once, instead of float32 copies of the whole tensor
// (engine/float32_compute.h). The composed form it replaces in BatchNormalization made about
// eight passes forward and a dozen backward, plus four conversion passes under a 16-bit policy
// (docs/ARCHITECTURE.md, "Fused batch normalization").
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

struct ChannelView {
  std::int64_t outer = 1, channels = 1, inner = 1;
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
  view.rows_per_block = std::max<std::int64_t>(1, kBlockElements / std::max<std::int64_t>(1, view.row_elements()));
  view.blocks = (view.outer + view.rows_per_block - 1) / view.rows_per_block;
  return view;
}

// Calls visit(index in the block, channel) for each element of `rows` whole rows.
template <typename Visit>
void for_each_in_rows(const ChannelView& view, std::int64_t rows, Visit&& visit) {
  const std::int64_t channels = view.channels, inner = view.inner;
  if (inner == 1) {
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < channels; ++c) visit(r * channels + c, c);
    }
    return;
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < channels; ++c) {
      const std::int64_t base = (r * channels + c) * inner;
      for (std::int64_t i = 0; i < inner; ++i) visit(base + i, c);
    }
  }
}

// What an element type computes in: float for float32 and the 16-bit types, double for float64.
// The statistics, multipliers and offsets are tensors of this type (the op makes them so).
template <typename Element>
using Wide = std::conditional_t<std::is_same_v<Element, double>, double, float>;

template <typename Element>
constexpr bool is_wide = std::is_same_v<Element, Wide<Element>>;

// `count` elements as Wide values: the tensor's own for float32 and float64, widened into
// `buffer` for 16-bit ones.
template <typename Element>
const Wide<Element>* read_block(const Element* x, std::int64_t count, std::vector<float>& buffer) {
  if constexpr (is_wide<Element>) {
    return x;
  } else {
    buffer.resize(static_cast<std::size_t>(count));
    widen(x, buffer.data(), count);
    return buffer.data();
  }
}

// compute(destination) writes `count` Wide results: straight into out for float32 and float64,
// into `buffer` and rounded once into out for 16-bit ones.
template <typename Element, typename Compute>
void write_block(Element* out, std::int64_t count, std::vector<float>& buffer, Compute&& compute) {
  if constexpr (is_wide<Element>) {
    compute(out);
  } else {
    buffer.resize(static_cast<std::size_t>(count));
    compute(buffer.data());
    narrow(buffer.data(), out, count);
  }
}

template <typename Fn>
void dispatch_element(DType dtype, const char* what, Fn&& fn) {
  if (dispatch_half_precision(dtype, fn)) return;
  dispatch_floating(dtype, what, fn);
}

template <typename Element>
const Wide<Element>* per_channel_values(const Tensor& values, const char* what) {
  constexpr DType expected = std::is_same_v<Element, double> ? DType::float64 : DType::float32;
  if (values.dtype() != expected) {
    throw DTypeError(str("batch normalization kernel: ", what, " is ", dtype_name(values.dtype()),
                         ", expected ", dtype_name(expected), " for ",
                         std::is_same_v<Element, double> ? "float64" : "float32 or 16-bit", " inputs"));
  }
  return elements_of<Wide<Element>>(values);
}

// Per block, per channel, two double sums of terms(index, channel) = {first, second}, then
// the blocks' sums added in block order into `first` and `second` (channels each).
template <typename Terms>
void channel_sums(const ChannelView& view, Terms&& terms, std::vector<double>& first,
                  std::vector<double>& second) {
  const std::int64_t channels = view.channels;
  std::vector<double> partial(static_cast<std::size_t>(view.blocks * 2 * channels), 0.0);
  parallel_for(view.blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t block = begin; block < end; ++block) {
      double* block_first = partial.data() + block * 2 * channels;
      double* block_second = block_first + channels;
      terms(block, block_first, block_second);
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
  dispatch_element(x.dtype(), "batch normalization statistics", [&](auto zero) {
    using Element = decltype(zero);
    using W = Wide<Element>;
    const Element* data = elements_of<Element>(x);
    const std::int64_t channels = view.channels, row = view.row_elements();
    std::vector<double> shift(static_cast<std::size_t>(channels), 0.0);
    if (view.per_channel() > 0) {
      for (std::int64_t c = 0; c < channels; ++c) {
        shift[static_cast<std::size_t>(c)] = static_cast<double>(static_cast<W>(data[c * view.inner]));
      }
    }
    std::vector<double> sum, sum_of_squares;
    channel_sums(
        view,
        [&](std::int64_t block, double* block_sum, double* block_squares) {
          std::vector<float> buffer;
          const std::int64_t rows = view.rows_in(block);
          const W* wide = read_block(data + block * view.rows_per_block * row, rows * row, buffer);
          const double* shifts = shift.data();
          for_each_in_rows(view, rows, [&](std::int64_t k, std::int64_t c) {
            const double d = static_cast<double>(wide[k]) - shifts[c];
            block_sum[c] += d;
            block_squares[c] += d * d;
          });
        },
        sum, sum_of_squares);
    per_channel_values<Element>(mean, "the mean");
    per_channel_values<Element>(variance, "the variance");
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
  dispatch_element(x.dtype(), "channel affine", [&](auto zero) {
    using Element = decltype(zero);
    using W = Wide<Element>;
    const W* scale = per_channel_values<Element>(multiplier, "the multiplier");
    const W* shift = per_channel_values<Element>(offset, "the offset");
    const Element* data = elements_of<Element>(x);
    Element* result = elements_of<Element>(out);
    const std::int64_t row = view.row_elements();
    parallel_for(view.blocks, 1, [&](std::int64_t begin, std::int64_t end) {
      std::vector<float> in_buffer, out_buffer;
      for (std::int64_t block = begin; block < end; ++block) {
        const std::int64_t rows = view.rows_in(block), start = block * view.rows_per_block * row;
        const W* wide = read_block(data + start, rows * row, in_buffer);
        write_block(result + start, rows * row, out_buffer, [&](W* destination) {
          for_each_in_rows(view, rows, [&](std::int64_t k, std::int64_t c) {
            destination[k] = wide[k] * scale[c] + shift[c];
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
  dispatch_element(x.dtype(), "batch normalization gradient", [&](auto zero) {
    using Element = decltype(zero);
    using W = Wide<Element>;
    if (output_gradient.dtype() != x.dtype()) {
      throw DTypeError(str("batch normalization gradient: the output gradient is ",
                           dtype_name(output_gradient.dtype()), ", expected x's ", dtype_name(x.dtype())));
    }
    const W* means = per_channel_values<Element>(mean, "the mean");
    const W* inverses = per_channel_values<Element>(inverse, "the inverse deviation");
    const W* scales = per_channel_values<Element>(scale, "the scale");
    const Element* data = elements_of<Element>(x);
    const Element* gradient = elements_of<Element>(output_gradient);
    Element* result = elements_of<Element>(input_gradient);
    const std::int64_t channels = view.channels, row = view.row_elements();
    std::vector<double> sum, centered;
    channel_sums(
        view,
        [&](std::int64_t block, double* block_sum, double* block_centered) {
          std::vector<float> x_buffer, gradient_buffer;
          const std::int64_t rows = view.rows_in(block), start = block * view.rows_per_block * row;
          const W* wide = read_block(data + start, rows * row, x_buffer);
          const W* wide_gradient = read_block(gradient + start, rows * row, gradient_buffer);
          for_each_in_rows(view, rows, [&](std::int64_t k, std::int64_t c) {
            const double g = static_cast<double>(wide_gradient[k]);
            block_sum[c] += g;
            block_centered[c] += g * (static_cast<double>(wide[k]) - static_cast<double>(means[c]));
          });
        },
        sum, centered);
    per_channel_values<Element>(gradient_sum, "the gradient sum");
    per_channel_values<Element>(centered_gradient_sum, "the centered gradient sum");
    W* sum_out = elements_of<W>(gradient_sum);
    W* centered_out = elements_of<W>(centered_gradient_sum);
    std::vector<W> terms_storage(static_cast<std::size_t>(3 * channels));
    W* gradient_scale = terms_storage.data();
    W* gradient_mean = gradient_scale + channels;
    W* slope = gradient_mean + channels;
    for (std::int64_t c = 0; c < channels; ++c) {
      const auto k = static_cast<std::size_t>(c);
      sum_out[c] = static_cast<W>(sum[k]);
      centered_out[c] = static_cast<W>(centered[k]);
      const rules::InputGradientTerms terms = rules::input_gradient_terms(
          static_cast<double>(scales[c]), static_cast<double>(inverses[c]), sum[k], centered[k], view.per_channel());
      gradient_scale[c] = static_cast<W>(terms.gradient_scale);
      gradient_mean[c] = static_cast<W>(terms.gradient_mean);
      slope[c] = static_cast<W>(terms.slope);
    }
    parallel_for(view.blocks, 1, [&](std::int64_t begin, std::int64_t end) {
      std::vector<float> x_buffer, gradient_buffer, out_buffer;
      for (std::int64_t block = begin; block < end; ++block) {
        const std::int64_t rows = view.rows_in(block), start = block * view.rows_per_block * row;
        const W* wide = read_block(data + start, rows * row, x_buffer);
        const W* wide_gradient = read_block(gradient + start, rows * row, gradient_buffer);
        write_block(result + start, rows * row, out_buffer, [&](W* destination) {
          for_each_in_rows(view, rows, [&](std::int64_t k, std::int64_t c) {
            destination[k] = gradient_scale[c] * (wide_gradient[k] - gradient_mean[c]) - slope[c] * (wide[k] - means[c]);
          });
        });
      }
    });
  });
}

}  // namespace keras::cpu
