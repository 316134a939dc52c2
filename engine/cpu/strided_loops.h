// CPU loops over a StridedPlan (engine/strided_plan.h): the innermost merged axis runs as one
// long vectorisable loop, the rows in parallel on the thread pool.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "engine/shape.h"
#include "engine/strided_plan.h"
#include "engine/thread_pool.h"

namespace keras::cpu {

// Below this many elements a loop runs on one thread: waking a sleeping worker costs
// ~5-10 µs here, which is what ~32K simple float operations take.
constexpr std::int64_t kParallelGrain = 32768;

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
