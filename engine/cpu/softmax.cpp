// CPU softmax and log_softmax over one axis, viewed as [outer, axis, inner], and their
// gradients: the lines in parallel, each by engine/line_rules.h (shared with the GPU); 16-bit
// lines widened one at a time.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "engine/cpu/half_conversion.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/strided_loops.h"
#include "engine/line_rules.h"

namespace keras::cpu {
namespace {

// Calls fn(base_offset) for each of the outer*inner lines along the axis (stride = inner).
template <typename Fn>
void for_each_line(const AxisLines& view, Fn fn) {
  parallel_for(view.count(),
               std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(view.length, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t line = begin; line < end; ++line) fn(view.line_start(line));
               });
}

// bfloat16 and float16 lines along the last axis (attention's probabilities, the largest
// activation of a transformer): the lines widened into float32 beside the thread, computed,
// and rounded once, instead of float32 copies of the whole tensor (engine/float32_compute.h).
// Lines along the last axis follow each other in memory, so they are widened and narrowed a
// group at a time (about kGroupElements elements) rather than one conversion call per line:
// the bfloat16 softmax over the scores (lines of 128) went from 1.92 to 1.81 ms (medians of 3
// interleaved runs of dtype_ops_benchmark; float32 1.6-1.7).
// `inputs` are the lines' 16-bit operands, `compute` runs the float32 rule on one line's
// widened copies into `result`.
constexpr std::int64_t kGroupElements = 2048;

template <typename Half, std::size_t Inputs, typename Compute>
void half_lines(const AxisLines& view, std::array<const Half*, Inputs> inputs, Half* out, Compute compute) {
  const std::int64_t length = view.length;
  const std::int64_t group = std::max<std::int64_t>(1, kGroupElements / std::max<std::int64_t>(length, 1));
  parallel_for(view.count(), std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(length, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 const std::size_t stride = static_cast<std::size_t>(group * length);
                 std::vector<float> buffers(stride * (Inputs + 1));
                 for (std::int64_t first = begin; first < end; first += group) {
                   const std::int64_t lines = std::min(group, end - first);
                   const std::int64_t base = first * length;
                   std::array<const float*, Inputs> wide;
                   for (std::size_t k = 0; k < Inputs; ++k) {
                     float* buffer = buffers.data() + stride * k;
                     widen(inputs[k] + base, buffer, lines * length);
                     wide[k] = buffer;
                   }
                   float* result = buffers.data() + stride * Inputs;
                   for (std::int64_t line = 0; line < lines; ++line) {
                     std::array<const float*, Inputs> line_inputs;
                     for (std::size_t k = 0; k < Inputs; ++k) line_inputs[k] = wide[k] + line * length;
                     compute(line_inputs, result + line * length, length);
                   }
                   narrow(result, out + base, lines * length);
                 }
               });
}


// A 16-bit tensor softmax cannot take line by line (an axis other than the last): float32
// copies, as engine/float32_compute.h makes them.
Tensor widened(const Tensor& x) {
  Tensor wide = Tensor::empty(x.local_shape(), float32);
  cast(x, wide);
  return wide;
}

}  // namespace

void softmax(const Tensor& x, int axis, bool log, Tensor& out) {
  AxisLines view = lines_along(x.shape(), axis);
  if (view.length == 0) return;
  if (is_half_precision(x.dtype())) {
    if (view.inner != 1) {
      Tensor wide_out = Tensor::empty(out.local_shape(), float32);
      softmax(widened(x), axis, log, wide_out);
      cast(wide_out, out);
      return;
    }
    dispatch_half_precision(x.dtype(), [&](auto half) {
      using Half = decltype(half);
      half_lines<Half, 1>(view, {elements_of<Half>(x)}, elements_of<Half>(out),
                          [log](const std::array<const float*, 1>& in, float* result, std::int64_t length) {
                            line::softmax(in[0], result, length, 1, log);
                          });
    });
    return;
  }
  dispatch_floating(x.dtype(), "softmax", [&](auto zero) {
    using T = decltype(zero);
    const T* in = static_cast<const T*>(x.raw_data());
    T* result = static_cast<T*>(out.raw_data());
    std::int64_t stride = view.inner;
    for_each_line(view, [&](std::int64_t base) {
      line::softmax(in + base, result + base, view.length, stride, log);
    });
  });
}

void softmax_gradient(const Tensor& y, const Tensor& output_gradient, int axis, bool log,
                      Tensor& input_gradient) {
  AxisLines view = lines_along(y.shape(), axis);
  if (view.length == 0) return;
  if (is_half_precision(y.dtype())) {
    if (view.inner != 1) {
      Tensor wide_gradient = Tensor::empty(input_gradient.local_shape(), float32);
      softmax_gradient(widened(y), widened(output_gradient), axis, log, wide_gradient);
      cast(wide_gradient, input_gradient);
      return;
    }
    dispatch_half_precision(y.dtype(), [&](auto half) {
      using Half = decltype(half);
      half_lines<Half, 2>(view, {elements_of<Half>(y), elements_of<Half>(output_gradient)},
                          elements_of<Half>(input_gradient),
                          [log](const std::array<const float*, 2>& in, float* result, std::int64_t length) {
                            line::softmax_gradient(in[0], in[1], result, length, 1, log);
                          });
    });
    return;
  }
  dispatch_floating(y.dtype(), "softmax gradient", [&](auto zero) {
    using T = decltype(zero);
    const T* out = static_cast<const T*>(y.raw_data());
    const T* dy = static_cast<const T*>(output_gradient.raw_data());
    T* dx = static_cast<T*>(input_gradient.raw_data());
    std::int64_t stride = view.inner;
    for_each_line(view, [&](std::int64_t base) {
      line::softmax_gradient(out + base, dy + base, dx + base, view.length, stride, log);
    });
  });
}

}  // namespace keras::cpu
