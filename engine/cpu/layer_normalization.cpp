// CPU layer normalization over the last axis (engine/kernel_list.h): the lines in parallel, each
// by engine/line_rules.h (shared with the GPU); 16-bit lines widened one at a time beside the
// thread and rounded once, instead of float32 copies of the whole tensor. gamma's and beta's
// gradients are sums over lines, taken over fixed blocks of lines in double and added in block
// order, so they do not depend on the thread count.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "engine/cpu/half_conversion.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/strided_loops.h"
#include "engine/errors.h"
#include "engine/line_rules.h"
#include "engine/thread_pool.h"

namespace keras::cpu {
namespace {

// Elements per block of lines for the gradient's sums.
constexpr std::int64_t kBlockElements = 8192;

struct LineView {
  std::int64_t lines = 0, length = 0;
};

LineView line_view(const Shape& shape) {
  LineView view;
  view.length = shape.empty() ? 1 : shape.back();
  view.lines = 1;
  for (std::size_t d = 0; d + 1 < shape.size(); ++d) view.lines *= shape[d];
  return view;
}


// A tensor of the compute type (gamma, beta, the lines' statistics), checked: the op makes them so.
template <typename Element, typename Tensorish>
auto compute_values(Tensorish& values, const char* what) {
  constexpr DType expected = std::is_same_v<Element, double> ? DType::float64 : DType::float32;
  if (values.dtype() != expected) {
    throw DTypeError(str("layer normalization kernel: ", what, " is ", dtype_name(values.dtype()), ", expected ",
                         dtype_name(expected)));
  }
  return elements_of<ComputeType<Element>>(values);
}

}  // namespace

void layer_normalization(const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon, Tensor& out,
                         Tensor& mean, Tensor& inverse) {
  const LineView view = line_view(x.shape());
  if (view.lines == 0) return;
  dispatch_floating_or_half(x.dtype(), "layer normalization", [&](auto zero) {
    using Element = decltype(zero);
    using W = ComputeType<Element>;
    const W* scale = compute_values<Element>(gamma, "gamma");
    const W* offset = compute_values<Element>(beta, "beta");
    W* means = compute_values<Element>(mean, "the mean");
    W* inverses = compute_values<Element>(inverse, "the inverse deviation");
    const Element* data = elements_of<Element>(x);
    Element* result = elements_of<Element>(out);
    const std::int64_t length = view.length;
    parallel_for(view.lines, std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(length, 1)),
                 [&](std::int64_t begin, std::int64_t end) {
                   std::vector<float> in_buffer, out_buffer;
                   for (std::int64_t line = begin; line < end; ++line) {
                     const W* in = in_compute_type(data + line * length, length, in_buffer);
                     write_from_compute_type(result + line * length, length, out_buffer, [&](W* destination) {
                       line::layer_normalization(in, destination, length, scale, offset, epsilon, means[line],
                                                 inverses[line]);
                     });
                   }
                 });
  });
}

void layer_normalization_gradient(const Tensor& x, const Tensor& output_gradient, const Tensor& mean,
                                  const Tensor& inverse, const Tensor& gamma, Tensor& input_gradient,
                                  Tensor& gamma_gradient, Tensor& beta_gradient) {
  const LineView view = line_view(x.shape());
  const std::int64_t length = view.length;
  dispatch_floating_or_half(x.dtype(), "layer normalization gradient", [&](auto zero) {
    using Element = decltype(zero);
    using W = ComputeType<Element>;
    if (output_gradient.dtype() != x.dtype()) {
      throw DTypeError(str("layer normalization gradient: the output gradient is ",
                           dtype_name(output_gradient.dtype()), ", expected x's ", dtype_name(x.dtype())));
    }
    const W* means = compute_values<Element>(mean, "the mean");
    const W* inverses = compute_values<Element>(inverse, "the inverse deviation");
    const W* scale = compute_values<Element>(gamma, "gamma");
    W* scale_gradient = compute_values<Element>(gamma_gradient, "gamma's gradient");
    W* offset_gradient = compute_values<Element>(beta_gradient, "beta's gradient");
    const Element* data = elements_of<Element>(x);
    const Element* gradient = elements_of<Element>(output_gradient);
    Element* result = elements_of<Element>(input_gradient);
    const std::int64_t lines_per_block = std::max<std::int64_t>(1, kBlockElements / std::max<std::int64_t>(length, 1));
    const std::int64_t blocks = (view.lines + lines_per_block - 1) / lines_per_block;
    // Per block: gamma's sums (length), then beta's (length).
    std::vector<double> partial(static_cast<std::size_t>(blocks * 2 * length), 0.0);
    parallel_for(blocks, 1, [&](std::int64_t begin, std::int64_t end) {
      std::vector<float> x_buffer, gradient_buffer, out_buffer;
      for (std::int64_t block = begin; block < end; ++block) {
        double* gamma_sums = partial.data() + block * 2 * length;
        double* beta_sums = gamma_sums + length;
        const std::int64_t last = std::min(view.lines, (block + 1) * lines_per_block);
        for (std::int64_t line = block * lines_per_block; line < last; ++line) {
          const W* in = in_compute_type(data + line * length, length, x_buffer);
          const W* dy = in_compute_type(gradient + line * length, length, gradient_buffer);
          const W line_mean = means[line], line_inverse = inverses[line];
          write_from_compute_type(result + line * length, length, out_buffer, [&](W* destination) {
            line::layer_normalization_gradient(in, dy, destination, length, scale, line_mean, line_inverse);
          });
          for (std::int64_t k = 0; k < length; ++k) {
            const double g = static_cast<double>(dy[k]);
            gamma_sums[k] += g * static_cast<double>((in[k] - line_mean) * line_inverse);
            beta_sums[k] += g;
          }
        }
      }
    });
    for (std::int64_t k = 0; k < length; ++k) {
      double gamma_total = 0, beta_total = 0;
      for (std::int64_t block = 0; block < blocks; ++block) {
        gamma_total += partial[static_cast<std::size_t>(block * 2 * length + k)];
        beta_total += partial[static_cast<std::size_t>(block * 2 * length + length + k)];
      }
      scale_gradient[k] = static_cast<W>(gamma_total);
      offset_gradient[k] = static_cast<W>(beta_total);
    }
  });
}

}  // namespace keras::cpu
