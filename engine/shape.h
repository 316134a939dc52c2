// Shapes and the index arithmetic every op shares: element counts, row-major strides, axis
// normalisation (negative axes count from the end, as in Keras) and broadcasting.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace keras {

using Shape = std::vector<std::int64_t>;

// The number of elements. A shape is valid when every dimension is >= 0 and the product of its
// dimensions, counting a 0 as a 1, fits in int64: then every element count and row-major stride
// derived from it fits too (a shape like (0, 2^62, 2^62) has no elements, but its strides would
// overflow). shape_size throws ShapeError naming the shape otherwise; checked_shape_size says
// nullopt, for readers that report a corrupt file in their own words.
std::int64_t shape_size(const Shape& shape);
std::optional<std::int64_t> checked_shape_size(const Shape& shape);
// shape_size(shape) * element_bytes, with the same overflow check; `what` names the caller.
std::size_t shape_bytes(const Shape& shape, std::size_t element_bytes, const char* what);
std::string shape_to_string(const Shape& shape);  // "(128, 784)" as Keras prints shapes
std::vector<std::int64_t> row_major_strides(const Shape& shape);
// Maps axis in [-rank, rank) to [0, rank); `what` names the op in the error.
int normalize_axis(std::int64_t axis, int rank, const char* what);
// NumPy broadcasting of two shapes; throws ShapeError naming both when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* what);
// Throws ValueError unless every dimension is >= 0, and ShapeError unless the shape is valid.
void check_valid_shape(const Shape& shape, const char* what);

}  // namespace keras
