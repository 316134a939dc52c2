// CPU reductions. Any set of axes is reduced as a sequence of blocks of consecutive axes; one
// block views the tensor as [outer, reduced, inner], which covers row sums (inner = 1, e.g. a
// loss over classes) and column sums (outer = 1, e.g. a bias gradient over the batch) with
// vectorisable loops.
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/cpu/half_conversion.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/strided_loops.h"
#include "engine/line_rules.h"
#include "engine/scalar_rules.h"

namespace keras::cpu {
namespace {

// One block [outer, reduced, inner] of `in` (elements In) into `out` (elements T, the compute
// type). A 16-bit input is read as it is (bfloat16 widened in registers in the loops, float16
// a row, or a row's columns, at a time beside the thread: half_conversion.h's
// readable_values): the same float32 arithmetic, in the same order, as on a float32 copy of
// the whole tensor, without the copy (the bias gradients' column sums made it 1.5% of the
// mixed_bfloat16 transformer step).
template <typename T, typename In = T>
void reduce_block(ReduceOp op, const In* in, T* out, std::int64_t outer, std::int64_t reduced,
                  std::int64_t inner) {
  // Integers accumulate in unsigned 64 bits: sums wrap around as NumPy's do, never overflow (UB).
  using Accumulator = std::conditional_t<std::is_floating_point_v<T>, double, std::uint64_t>;
  if (inner == 1) {
    parallel_for(outer, std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(reduced, 1)),
                 [&](std::int64_t begin, std::int64_t end) {
                   std::vector<float> buffer;
                   for (std::int64_t o = begin; o < end; ++o) {
                     const auto* row = readable_values(in + o * reduced, reduced, buffer);
                     if (op == ReduceOp::sum) {
                       Accumulator total = 0;
                       for (std::int64_t r = 0; r < reduced; ++r) total += static_cast<Accumulator>(static_cast<T>(row[r]));
                       out[o] = static_cast<T>(total);
                     } else {
                       T best = static_cast<T>(row[0]);
                       for (std::int64_t r = 1; r < reduced; ++r) {
                         best = op == ReduceOp::max ? scalar::maximum(best, static_cast<T>(row[r]))
                                                    : scalar::minimum(best, static_cast<T>(row[r]));
                       }
                       out[o] = best;
                     }
                   }
                 });
    return;
  }
  // inner > 1: accumulate whole rows; parallel over outer, or over inner columns if outer = 1.
  auto run = [&](std::int64_t o, std::int64_t column_begin, std::int64_t column_end, std::vector<float>& buffer) {
    T* destination = out + o * inner + column_begin;
    const In* source = in + o * reduced * inner + column_begin;
    const std::int64_t columns = column_end - column_begin;
    if (reduced == 0) {
      for (std::int64_t i = 0; i < columns; ++i) destination[i] = T{};
      return;
    }
    const auto* first = readable_values(source, columns, buffer);
    for (std::int64_t i = 0; i < columns; ++i) destination[i] = static_cast<T>(first[i]);
    for (std::int64_t r = 1; r < reduced; ++r) {
      const auto* row = readable_values(source + r * inner, columns, buffer);
      if (op == ReduceOp::sum) {
        for (std::int64_t i = 0; i < columns; ++i) destination[i] = scalar::add(destination[i], static_cast<T>(row[i]));
      } else if (op == ReduceOp::max) {
        for (std::int64_t i = 0; i < columns; ++i) destination[i] = scalar::maximum(destination[i], static_cast<T>(row[i]));
      } else {
        for (std::int64_t i = 0; i < columns; ++i) destination[i] = scalar::minimum(destination[i], static_cast<T>(row[i]));
      }
    }
  };
  std::int64_t work_per_outer = std::max<std::int64_t>(1, reduced * inner);
  if (outer == 1) {
    parallel_for(inner, std::max<std::int64_t>(16, kParallelGrain / std::max<std::int64_t>(reduced, 1)),
                 [&](std::int64_t begin, std::int64_t end) {
                   std::vector<float> buffer;
                   run(0, begin, end, buffer);
                 });
  } else {
    parallel_for(outer, std::max<std::int64_t>(1, kParallelGrain / work_per_outer),
                 [&](std::int64_t begin, std::int64_t end) {
                   std::vector<float> buffer;
                   for (std::int64_t o = begin; o < end; ++o) run(o, 0, inner, buffer);
                 });
  }
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, const std::vector<int>& axes, Tensor& out) {
  if (is_half_precision(x.dtype())) {
    if (axes.empty()) {
      std::memcpy(out.raw_data(), x.raw_data(), x.nbytes());
      return;
    }
    // The first pass reads the 16-bit input; every pass writes float32; the (smaller) result
    // is rounded once at the end.
    dispatch_half_precision(x.dtype(), [&](auto half) {
      using Half = decltype(half);
      std::vector<ReductionPass> passes = reduction_passes(x.shape(), axes);
      Tensor current;
      for (std::size_t p = 0; p < passes.size(); ++p) {
        const ReductionPass& pass = passes[p];
        Tensor next = Tensor::empty(pass.result, float32, x.device());
        if (p == 0) {
          reduce_block<float, Half>(op, elements_of<Half>(x), elements_of<float>(next), pass.outer, pass.reduced, pass.inner);
        } else {
          reduce_block<float>(op, elements_of<float>(current), elements_of<float>(next), pass.outer, pass.reduced, pass.inner);
        }
        current = next;
      }
      cast(current, out);
    });
    return;
  }
  dispatch_numeric(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if (axes.empty()) {
      std::memcpy(out.raw_data(), x.raw_data(), x.nbytes());
      return;
    }
    std::vector<ReductionPass> passes = reduction_passes(x.shape(), axes);
    Tensor current = x;
    for (std::size_t p = 0; p < passes.size(); ++p) {
      const ReductionPass& pass = passes[p];
      Tensor next = p + 1 == passes.size() ? out : Tensor::empty(pass.result, x.dtype(), x.device());
      reduce_block<T>(op, static_cast<const T*>(current.raw_data()),
                      static_cast<T*>(next.raw_data()), pass.outer, pass.reduced, pass.inner);
      current = next;
    }
  });
}

void arg_reduce(bool largest, const Tensor& x, int axis, Tensor& out) {
  dispatch_numeric(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const AxisLines lines = lines_along(x.shape(), axis);
    const std::int64_t outer = lines.outer, reduced = lines.length, inner = lines.inner;
    const T* in = static_cast<const T*>(x.raw_data());
    auto* result = static_cast<std::int64_t*>(out.raw_data());
    parallel_for(outer * inner, std::max<std::int64_t>(1, kParallelGrain / reduced),
                 [&](std::int64_t begin, std::int64_t end) {
                   for (std::int64_t flat = begin; flat < end; ++flat) {
                     std::int64_t o = flat / inner, i = flat % inner;
                     result[flat] = line::arg_reduce(in + o * reduced * inner + i, reduced, inner,
                                                     largest);
                   }
                 });
  });
}

}  // namespace keras::cpu
