// Broadcast strides, shared by the CPU and CUDA kernels.
#include "engine/strided_plan.h"

namespace keras {

std::vector<std::int64_t> broadcast_strides(const Shape& shape, const Shape& out_shape) {
  std::vector<std::int64_t> own = row_major_strides(shape);
  std::vector<std::int64_t> strides(out_shape.size(), 0);
  std::size_t offset = out_shape.size() - shape.size();
  for (std::size_t i = 0; i < shape.size(); ++i) {
    strides[offset + i] = shape[i] == 1 ? 0 : own[i];
  }
  return strides;
}

std::vector<ReductionPass> reduction_passes(const Shape& shape, const std::vector<int>& axes) {
  std::vector<std::pair<int, int>> blocks;  // [first, last] axis of each block
  for (int axis : axes) {
    if (!blocks.empty() && blocks.back().second == axis - 1) {
      blocks.back().second = axis;
    } else {
      blocks.emplace_back(axis, axis);
    }
  }
  std::vector<ReductionPass> passes;
  Shape current = shape;
  for (auto block = blocks.rbegin(); block != blocks.rend(); ++block) {
    auto [first, last] = *block;
    ReductionPass pass;
    for (int d = 0; d < first; ++d) pass.outer *= current[d];
    for (int d = first; d <= last; ++d) pass.reduced *= current[d];
    for (int d = last + 1; d < static_cast<int>(current.size()); ++d) pass.inner *= current[d];
    for (int d = first; d <= last; ++d) current[d] = 1;
    pass.result = current;
    passes.push_back(pass);
  }
  return passes;
}

}  // namespace keras
