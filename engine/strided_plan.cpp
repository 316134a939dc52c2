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

}  // namespace keras
