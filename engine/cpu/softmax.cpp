// CPU softmax and log_softmax over one axis, viewed as [outer, axis, inner], with the max
// subtracted for stability; and their gradients from the saved output y:
//   softmax:     dx = y * (dy - sum(dy * y))
//   log_softmax: dx = dy - exp(y) * sum(dy)
#include <algorithm>
#include <cmath>

#include "engine/cpu/kernels.h"
#include "engine/cpu/strided_loops.h"

namespace keras::cpu {
namespace {

struct AxisView {
  std::int64_t outer = 1, length = 1, inner = 1;
};

AxisView view_of(const Shape& shape, int axis) {
  AxisView view;
  for (int d = 0; d < axis; ++d) view.outer *= shape[d];
  view.length = shape[axis];
  for (int d = axis + 1; d < static_cast<int>(shape.size()); ++d) view.inner *= shape[d];
  return view;
}

// Calls fn(base_offset) for each of the outer*inner lines along the axis (stride = inner).
template <typename Fn>
void for_each_line(const AxisView& view, Fn fn) {
  parallel_for(view.outer * view.inner,
               std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(view.length, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t line = begin; line < end; ++line) {
                   std::int64_t o = line / view.inner, i = line % view.inner;
                   fn(o * view.length * view.inner + i);
                 }
               });
}

}  // namespace

void softmax(const Tensor& x, int axis, bool log, Tensor& out) {
  AxisView view = view_of(x.shape(), axis);
  if (view.length == 0) return;
  dispatch_floating(x.dtype(), "softmax", [&](auto zero) {
    using T = decltype(zero);
    const T* in = static_cast<const T*>(x.raw_data());
    T* result = static_cast<T*>(out.raw_data());
    std::int64_t stride = view.inner;
    for_each_line(view, [&](std::int64_t base) {
      T largest = in[base];
      for (std::int64_t k = 1; k < view.length; ++k) largest = std::max(largest, in[base + k * stride]);
      double total = 0;
      for (std::int64_t k = 0; k < view.length; ++k) {
        T shifted = in[base + k * stride] - largest;
        T e = std::exp(shifted);
        total += e;
        result[base + k * stride] = log ? shifted : e;
      }
      if (log) {
        T log_total = static_cast<T>(std::log(total));
        for (std::int64_t k = 0; k < view.length; ++k) result[base + k * stride] -= log_total;
      } else {
        T scale = static_cast<T>(1.0 / total);
        for (std::int64_t k = 0; k < view.length; ++k) result[base + k * stride] *= scale;
      }
    });
  });
}

void softmax_gradient(const Tensor& y, const Tensor& output_gradient, int axis, bool log,
                      Tensor& input_gradient) {
  AxisView view = view_of(y.shape(), axis);
  if (view.length == 0) return;
  dispatch_floating(y.dtype(), "softmax gradient", [&](auto zero) {
    using T = decltype(zero);
    const T* out = static_cast<const T*>(y.raw_data());
    const T* dy = static_cast<const T*>(output_gradient.raw_data());
    T* dx = static_cast<T*>(input_gradient.raw_data());
    std::int64_t stride = view.inner;
    for_each_line(view, [&](std::int64_t base) {
      double total = 0;
      for (std::int64_t k = 0; k < view.length; ++k) {
        std::int64_t at = base + k * stride;
        total += log ? dy[at] : dy[at] * out[at];
      }
      T t = static_cast<T>(total);
      for (std::int64_t k = 0; k < view.length; ++k) {
        std::int64_t at = base + k * stride;
        dx[at] = log ? dy[at] - std::exp(out[at]) * t : out[at] * (dy[at] - t);
      }
    });
  });
}

}  // namespace keras::cpu
