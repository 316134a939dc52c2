// CPU softmax and log_softmax over one axis, viewed as [outer, axis, inner], and their
// gradients: the lines in parallel, each by engine/line_rules.h (shared with the GPU).
#include <algorithm>
#include <cmath>

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

}  // namespace

void softmax(const Tensor& x, int axis, bool log, Tensor& out) {
  AxisLines view = lines_along(x.shape(), axis);
  if (view.length == 0) return;
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
