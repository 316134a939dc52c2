// GPU reductions. As on the CPU, the sorted axes are split into blocks of consecutive axes and
// each block views its input as [outer, reduced, inner]. A block is reduced in two passes that
// need no atomics and no shared memory, so the result does not depend on the launch shape or
// the GPU (a sum is bit-for-bit the same on every run):
//   1. each thread folds one chunk of kChunk consecutive reduced elements of one output line,
//   2. each thread folds the chunk results of one line, in order.
// Float sums accumulate in double, integer sums in unsigned 64 bits (wrapping as NumPy's do).
// Consecutive threads take consecutive `inner` columns, so the column sums of a bias gradient
// read coalesced memory; row sums (inner = 1) stride by `reduced` and are left for a warp-per-row
// kernel once a GPU is at hand to measure it.
#pragma once
#include <type_traits>

#include "engine/cuda/kernels.h"
#include "engine/line_rules.h"
#include "engine/scalar_rules.h"

namespace keras::gpu_kernels {

inline constexpr std::int64_t kReduceChunk = 1024;

template <typename T>
using ReduceAccumulator =
    std::conditional_t<std::is_floating_point_v<T>, double, std::uint64_t>;

template <typename T, typename Accumulator>
KERAS_HOST_DEVICE Accumulator fold(ReduceOp op, Accumulator total, T value) {
  if (op == ReduceOp::sum) {
    return total + static_cast<Accumulator>(value);
  }
  T current = static_cast<T>(total);
  return static_cast<Accumulator>(op == ReduceOp::max ? scalar::maximum(current, value)
                                                      : scalar::minimum(current, value));
}

// Max and min carry T's value in the accumulator: a double holds every float exactly, and an
// unsigned 64-bit word every integer (converted back with the same static_cast).
template <typename T>
struct ReduceChunkBody {
  ReduceOp op;
  const T* in;
  ReduceAccumulator<T>* partial;  // [outer * inner, chunks]
  std::int64_t reduced, inner, chunks;
  KERAS_HOST_DEVICE void operator()(std::int64_t flat) const {
    std::int64_t chunk = flat % chunks;
    std::int64_t line = flat / chunks;
    std::int64_t o = line / inner, i = line % inner;
    const T* base = in + o * reduced * inner + i;
    std::int64_t begin = chunk * kReduceChunk;
    std::int64_t end = begin + kReduceChunk < reduced ? begin + kReduceChunk : reduced;
    using Accumulator = ReduceAccumulator<T>;
    Accumulator total = op == ReduceOp::sum ? Accumulator{} : static_cast<Accumulator>(base[begin * inner]);
    for (std::int64_t r = op == ReduceOp::sum ? begin : begin + 1; r < end; ++r) {
      total = fold(op, total, base[r * inner]);
    }
    partial[flat] = total;
  }
};

template <typename T>
struct ReduceFinishBody {
  ReduceOp op;
  const ReduceAccumulator<T>* partial;
  T* out;
  std::int64_t chunks;
  KERAS_HOST_DEVICE void operator()(std::int64_t line) const {
    using Accumulator = ReduceAccumulator<T>;
    Accumulator total = partial[line * chunks];
    for (std::int64_t c = 1; c < chunks; ++c) {
      Accumulator next = partial[line * chunks + c];
      total = op == ReduceOp::sum ? total + next : fold(op, total, static_cast<T>(next));
    }
    out[line] = static_cast<T>(total);
  }
};

template <class Launcher, typename T>
void reduce_block(Launcher& launcher, ReduceOp op, const Tensor& in, Tensor& out,
                  std::int64_t outer, std::int64_t reduced, std::int64_t inner) {
  std::int64_t lines = outer * inner;
  if (lines == 0) return;
  if (reduced == 0) {  // a sum of nothing is 0 (ops refuse max and min of nothing)
    fill(launcher, out, 0.0);
    return;
  }
  std::int64_t chunks = (reduced + kReduceChunk - 1) / kReduceChunk;
  DType accumulator_dtype = std::is_floating_point_v<T> ? DType::float64 : DType::int64;
  Tensor partial = Tensor::empty({lines, chunks}, accumulator_dtype, in.device());
  auto* partial_data = static_cast<ReduceAccumulator<T>*>(partial.raw_data());
  launcher.for_each(lines * chunks, ReduceChunkBody<T>{op, static_cast<const T*>(in.raw_data()),
                                                       partial_data, reduced, inner, chunks});
  launcher.for_each(lines, ReduceFinishBody<T>{op, partial_data, static_cast<T*>(out.raw_data()),
                                               chunks});
}

template <class Launcher>
void reduce(Launcher& launcher, ReduceOp op, const Tensor& x, const std::vector<int>& axes,
            Tensor& out) {
  if (axes.empty()) {
    launcher.copy(out.raw_data(), x.raw_data(), x.nbytes());
    return;
  }
  dispatch_numeric(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    std::vector<ReductionPass> passes = reduction_passes(x.shape(), axes);
    Tensor current = x;
    for (std::size_t p = 0; p < passes.size(); ++p) {
      const ReductionPass& pass = passes[p];
      Tensor next = p + 1 == passes.size() ? out : Tensor::empty(pass.result, x.dtype(), x.device());
      reduce_block<Launcher, T>(launcher, op, current, next, pass.outer, pass.reduced, pass.inner);
      current = next;
    }
  });
}

template <typename T>
struct ArgReduceBody {
  bool largest;
  const T* in;
  std::int64_t* out;
  std::int64_t reduced, inner;
  KERAS_HOST_DEVICE void operator()(std::int64_t flat) const {
    std::int64_t o = flat / inner, i = flat % inner;
    out[flat] = line::arg_reduce(in + o * reduced * inner + i, reduced, inner, largest);
  }
};

template <class Launcher>
void arg_reduce(Launcher& launcher, bool largest, const Tensor& x, int axis, Tensor& out) {
  dispatch_numeric(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const AxisLines lines = lines_along(x.shape(), axis);
    const std::int64_t outer = lines.outer, reduced = lines.length, inner = lines.inner;
    launcher.for_each(outer * inner,
                      ArgReduceBody<T>{largest, static_cast<const T*>(x.raw_data()),
                                       static_cast<std::int64_t*>(out.raw_data()), reduced, inner});
  });
}

}  // namespace keras::gpu_kernels
