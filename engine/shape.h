// Shapes and the index arithmetic every op shares: element counts, row-major strides, axis
// normalisation (negative axes count from the end, as in Keras) and broadcasting.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace keras {

using Shape = std::vector<std::int64_t>;

std::int64_t shape_size(const Shape& shape);
std::string shape_to_string(const Shape& shape);  // "(128, 784)" as Keras prints shapes
std::vector<std::int64_t> row_major_strides(const Shape& shape);
// Maps axis in [-rank, rank) to [0, rank); `what` names the op in the error.
int normalize_axis(std::int64_t axis, int rank, const char* what);
// NumPy broadcasting of two shapes; throws ShapeError naming both when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* what);
// Throws ValueError unless every dimension is >= 0.
void check_valid_shape(const Shape& shape, const char* what);

}  // namespace keras
