// CPU max and average pooling and their input gradients, element by element through the
// rules the GPU runs too (engine/window_rules.h), split over the engine's pool. Pooling is a
// few percent of a CNN step (no multiply-adds), so one body for both backends is worth more
// than a tuned CPU one.
#include "engine/cpu/kernels.h"
#include "engine/thread_pool.h"
#include "engine/window_rules.h"

namespace keras::cpu {

void pool(PoolOp op, const Tensor& input, const WindowGeometry& geometry, Tensor& out) {
  dispatch_floating(input.dtype(), "pooling", [&](auto zero) {
    using T = decltype(zero);
    const T* x = elements_of<T>(input);
    T* y = elements_of<T>(out);
    bool max = op == PoolOp::max;
    parallel_for(out.size(), 4096, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t e = begin; e < end; ++e) y[e] = window::pool_element(max, x, geometry, e);
    });
  });
}

void pool_gradient(PoolOp op, const Tensor& input, const Tensor& output_gradient,
                   const WindowGeometry& geometry, Tensor& input_gradient) {
  dispatch_floating(input.dtype(), "pooling gradient", [&](auto zero) {
    using T = decltype(zero);
    const T* x = elements_of<T>(input);
    const T* dy = elements_of<T>(output_gradient);
    T* dx = elements_of<T>(input_gradient);
    bool max = op == PoolOp::max;
    parallel_for(input_gradient.size(), 4096, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t e = begin; e < end; ++e) {
        dx[e] = window::pool_gradient_element(max, x, dy, geometry, e);
      }
    });
  });
}

}  // namespace keras::cpu
