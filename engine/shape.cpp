// Shape arithmetic shared by all ops.
#include "engine/shape.h"

#include <algorithm>

#include "engine/errors.h"

namespace keras {

std::int64_t shape_size(const Shape& shape) {
  std::int64_t size = 1;
  for (std::int64_t dim : shape) size *= dim;
  return size;
}

std::string shape_to_string(const Shape& shape) {
  std::string text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  if (shape.size() == 1) text += ",";
  return text + ")";
}

std::vector<std::int64_t> row_major_strides(const Shape& shape) {
  std::vector<std::int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * shape[i + 1];
  }
  return strides;
}

int normalize_axis(std::int64_t axis, int rank, const char* what) {
  if (axis < -rank || axis >= rank) {
    throw ValueError(str(what, ": axis ", axis, " is out of range for a tensor of rank ", rank,
                         "; expected an axis in [", -rank, ", ", rank, ")"));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* what) {
  std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    std::int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    std::int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw ShapeError(str(what, ": shapes ", shape_to_string(a), " and ", shape_to_string(b),
                           " cannot be broadcast together (dimension ", i, " is ", da, " vs ", db,
                           "; each pair must be equal or one of them 1)"));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

void check_valid_shape(const Shape& shape, const char* what) {
  for (std::int64_t dim : shape) {
    if (dim < 0) {
      throw ValueError(str(what, ": shape ", shape_to_string(shape),
                           " has a negative dimension; expected every dimension >= 0"));
    }
  }
}

}  // namespace keras
