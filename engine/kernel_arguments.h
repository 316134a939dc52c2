// How the kernels of every backend (engine/cpu/, engine/cuda/) read their Tensor arguments,
// written once: a typed pointer to a tensor's elements without Tensor::data's dtype check (the
// op has checked the dtypes before calling the kernel), and a tensor seen as lines along one
// axis (outer × length × inner: the line through element `o * length * inner + i` has its
// elements `inner` apart).
#pragma once
#include <cstdint>

#include "engine/tensor.h"

namespace keras {

template <typename T>
T* elements_of(Tensor& x) {
  return static_cast<T*>(x.raw_data());
}
template <typename T>
const T* elements_of(const Tensor& x) {
  return static_cast<const T*>(x.raw_data());
}

struct AxisLines {
  std::int64_t outer = 1, length = 1, inner = 1;
  std::int64_t count() const { return outer * inner; }
  // The offset of the first element of line `line` in [0, count()).
  std::int64_t line_start(std::int64_t line) const { return line / inner * length * inner + line % inner; }
};

inline AxisLines lines_along(const Shape& shape, int axis) {
  AxisLines lines;
  for (int d = 0; d < axis; ++d) lines.outer *= shape[d];
  lines.length = shape[axis];
  for (int d = axis + 1; d < static_cast<int>(shape.size()); ++d) lines.inner *= shape[d];
  return lines;
}

}  // namespace keras
