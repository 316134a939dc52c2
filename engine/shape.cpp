// Shape arithmetic shared by all ops.
#include "engine/shape.h"

#include <algorithm>
#include <limits>

#include "engine/errors.h"

namespace keras {

std::optional<std::int64_t> checked_shape_size(const Shape& shape) {
  std::int64_t bound = 1;
  bool empty = false;
  for (std::int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    if (dim == 0) empty = true;
    if (__builtin_mul_overflow(bound, dim == 0 ? 1 : dim, &bound)) return std::nullopt;
  }
  return empty ? 0 : bound;
}

std::int64_t shape_size(const Shape& shape) {
  if (std::optional<std::int64_t> size = checked_shape_size(shape)) return *size;
  for (std::int64_t dim : shape) {
    if (dim < 0) {
      throw ShapeError(str("shape ", shape_to_string(shape),
                           " has a negative dimension; expected every dimension >= 0"));
    }
  }
  throw ShapeError(str("shape ", shape_to_string(shape), " has more elements than fit in a ",
                       "64-bit count (the product of its dimensions, zeros counted as ones, must ",
                       "be below 2^63)"));
}

std::size_t shape_bytes(const Shape& shape, std::size_t element_bytes, const char* what) {
  auto size = static_cast<std::uint64_t>(shape_size(shape));
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(size, element_bytes, &bytes) ||
      bytes > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    throw ShapeError(str(what, ": shape ", shape_to_string(shape), " of ", element_bytes,
                         "-byte elements needs more bytes than fit in 64 bits"));
  }
  return static_cast<std::size_t>(bytes);
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
  if (!checked_shape_size(shape)) {
    throw ShapeError(str(what, ": shape ", shape_to_string(shape), " has more elements than fit ",
                         "in a 64-bit count (the product of its dimensions, zeros counted as ",
                         "ones, must be below 2^63)"));
  }
}

}  // namespace keras
