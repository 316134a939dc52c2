// Loops over several tensors that share an output's shape through per-input strides (0 on a
// broadcast axis). Axes that are contiguous for every operand are merged first, so the common
// cases (same shapes, a row of biases, a scalar) run as one long vectorisable inner loop.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "engine/shape.h"
#include "engine/thread_pool.h"

namespace keras::cpu {

// Below this many elements a loop runs on one thread: waking a sleeping worker costs
// ~5-10 µs here, which is what ~32K simple float operations take.
constexpr std::int64_t kParallelGrain = 32768;

// Strides of `shape` (right-aligned to `out_shape`, NumPy style) with 0 on broadcast axes.
std::vector<std::int64_t> broadcast_strides(const Shape& shape, const Shape& out_shape);

template <int N>
struct StridedPlan {
  Shape shape;                                        // merged output shape
  std::array<std::vector<std::int64_t>, N> strides;  // one list per operand, merged likewise
};

template <int N>
StridedPlan<N> make_plan(const Shape& out_shape, std::array<std::vector<std::int64_t>, N> strides) {
  StridedPlan<N> plan;
  for (int d = 0; d < static_cast<int>(out_shape.size()); ++d) {
    if (out_shape[d] == 1) continue;  // size-1 axes contribute nothing
    bool merge = !plan.shape.empty();
    for (int k = 0; merge && k < N; ++k) {
      merge = plan.strides[k].back() == strides[k][d] * out_shape[d];
    }
    if (merge) {
      plan.shape.back() *= out_shape[d];
      for (int k = 0; k < N; ++k) plan.strides[k].back() = strides[k][d];
    } else {
      plan.shape.push_back(out_shape[d]);
      for (int k = 0; k < N; ++k) plan.strides[k].push_back(strides[k][d]);
    }
  }
  if (plan.shape.empty()) {
    plan.shape.push_back(1);
    for (int k = 0; k < N; ++k) plan.strides[k].push_back(0);
  }
  return plan;
}

// Calls row(offsets, inner_strides, count) for every innermost row of the plan, in parallel
// over rows (or over chunks of a single long row). offsets[k] is operand k's first element.
template <int N, typename RowFn>
void for_each_row(const StridedPlan<N>& plan, RowFn&& row) {
  int rank = static_cast<int>(plan.shape.size());
  std::int64_t inner = plan.shape.back();
  std::array<std::int64_t, N> inner_strides;
  for (int k = 0; k < N; ++k) inner_strides[k] = plan.strides[k].back();
  std::int64_t rows = shape_size(plan.shape) / (inner == 0 ? 1 : inner);
  if (inner == 0 || rows == 0) return;
  if (rows == 1) {
    parallel_for(inner, kParallelGrain, [&](std::int64_t begin, std::int64_t end) {
      std::array<std::int64_t, N> offsets;
      for (int k = 0; k < N; ++k) offsets[k] = begin * inner_strides[k];
      row(offsets, inner_strides, end - begin);
    });
    return;
  }
  std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / inner);
  parallel_for(rows, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      std::array<std::int64_t, N> offsets{};
      std::int64_t rest = r;
      for (int d = rank - 2; d >= 0; --d) {
        std::int64_t index = rest % plan.shape[d];
        rest /= plan.shape[d];
        for (int k = 0; k < N; ++k) offsets[k] += index * plan.strides[k][d];
      }
      row(offsets, inner_strides, inner);
    }
  });
}

}  // namespace keras::cpu
