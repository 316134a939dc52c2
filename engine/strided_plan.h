// How several tensors that share an output's shape are walked: per-operand strides (0 on a
// broadcast axis), with the axes that are contiguous for every operand merged first, so the
// common cases (same shapes, a row of biases, a scalar) become one long run. The CPU loops
// (engine/cpu/strided_loops.h) and the CUDA index maps (engine/cuda/index_map.h) both start
// from this plan.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "engine/shape.h"

namespace keras {

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

// A reduction over sorted, unique axes runs as one pass per block of consecutive axes, the
// last block first; each pass views its input as [outer, reduced, inner] and leaves `result`
// (its input's shape with the block's axes set to 1). The CPU and CUDA reductions share it.
struct ReductionPass {
  std::int64_t outer = 1, reduced = 1, inner = 1;
  Shape result;
};
std::vector<ReductionPass> reduction_passes(const Shape& shape, const std::vector<int>& axes);

}  // namespace keras
