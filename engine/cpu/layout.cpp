// CPU kernels that move elements: transpose, slices, gather (take) and its scatter-add
// gradient, one_hot; and the range check of their indices.
#include <cstring>

#include "engine/cpu/kernels.h"
#include "engine/errors.h"
#include "engine/cpu/strided_loops.h"

namespace keras::cpu {
namespace {

// `count` elements of kBytes bytes, `from_stride` and `to_stride` elements apart. The size is a
// constant so that each copy is one load and one store: with the size known only at run time
// every element was a call to memcpy, and a transpose of the last two axes of 16x4x128x128
// float32 scores took 3.4-4.9 ms on one core.
template <std::size_t kBytes>
void copy_elements(const char* from, char* to, std::int64_t count, std::int64_t from_stride, std::int64_t to_stride) {
  const auto step_from = from_stride * static_cast<std::int64_t>(kBytes), step_to = to_stride * static_cast<std::int64_t>(kBytes);
  for (std::int64_t i = 0; i < count; ++i) std::memcpy(to + i * step_to, from + i * step_from, kBytes);
}

// Copies between two strided views of the same logical shape, element size `bytes`.
void strided_copy(const Shape& shape, const std::vector<std::int64_t>& source_strides,
                  const std::vector<std::int64_t>& destination_strides, const void* source,
                  void* destination, std::size_t bytes) {
  auto plan = make_plan<2>(shape, {source_strides, destination_strides});
  auto* from = static_cast<const char*>(source);
  auto* to = static_cast<char*>(destination);
  for_each_row<2>(plan, [&](const std::array<std::int64_t, 2>& offsets,
                            const std::array<std::int64_t, 2>& strides, std::int64_t count) {
    if (strides[0] == 1 && strides[1] == 1) {
      std::memcpy(to + offsets[1] * bytes, from + offsets[0] * bytes, count * bytes);
      return;
    }
    const char* source_row = from + offsets[0] * bytes;
    char* destination_row = to + offsets[1] * bytes;
    switch (bytes) {
      case 1: copy_elements<1>(source_row, destination_row, count, strides[0], strides[1]); return;
      case 2: copy_elements<2>(source_row, destination_row, count, strides[0], strides[1]); return;
      case 4: copy_elements<4>(source_row, destination_row, count, strides[0], strides[1]); return;
      case 8: copy_elements<8>(source_row, destination_row, count, strides[0], strides[1]); return;
      default:
        for (std::int64_t i = 0; i < count; ++i) {
          std::memcpy(destination_row + i * strides[1] * bytes, source_row + i * strides[0] * bytes, bytes);
        }
    }
  });
}

std::int64_t offset_of(const Shape& starts, const std::vector<std::int64_t>& strides) {
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < starts.size(); ++i) offset += starts[i] * strides[i];
  return offset;
}

}  // namespace

void transpose(const Tensor& x, const std::vector<int>& permutation, Tensor& out) {
  std::vector<std::int64_t> in_strides = row_major_strides(x.shape());
  std::vector<std::int64_t> source_strides(permutation.size());
  for (std::size_t i = 0; i < permutation.size(); ++i) source_strides[i] = in_strides[permutation[i]];
  strided_copy(out.shape(), source_strides, row_major_strides(out.shape()), x.raw_data(),
               out.raw_data(), dtype_size(x.dtype()));
}

void copy_slice(const Tensor& x, const Shape& starts, Tensor& out) {
  std::vector<std::int64_t> strides = row_major_strides(x.shape());
  std::size_t bytes = dtype_size(x.dtype());
  strided_copy(out.shape(), strides, row_major_strides(out.shape()),
               static_cast<const char*>(x.raw_data()) + offset_of(starts, strides) * bytes,
               out.raw_data(), bytes);
}

void write_slice(const Tensor& source, const Shape& starts, Tensor& destination) {
  std::vector<std::int64_t> strides = row_major_strides(destination.shape());
  std::size_t bytes = dtype_size(source.dtype());
  strided_copy(source.shape(), row_major_strides(source.shape()), strides, source.raw_data(),
               static_cast<char*>(destination.raw_data()) + offset_of(starts, strides) * bytes,
               bytes);
}

namespace {
template <typename Index>
void check_each_index(const Index* indices, std::int64_t count, const IndexCheck& check) {
  for (std::int64_t i = 0; i < count; ++i) {
    auto index = static_cast<std::int64_t>(indices[i]);
    if (index < check.lower || index >= check.upper) {
      throw ValueError(index_error_message(check.message, index));
    }
  }
}
}  // namespace

void check_indices(const Tensor& indices, const IndexCheck& check) {
  if (indices.dtype() == int32) {
    check_each_index(static_cast<const std::int32_t*>(indices.raw_data()), indices.size(), check);
  } else if (indices.dtype() == int64) {
    check_each_index(static_cast<const std::int64_t*>(indices.raw_data()), indices.size(), check);
  } else {
    throw DTypeError(str("indices must be int32 or int64, got ", dtype_name(indices.dtype())));
  }
}

namespace {
std::vector<std::int64_t> normalized_indices(const Tensor& indices, std::int64_t limit) {
  std::vector<std::int64_t> values = indices.to_vector<std::int64_t>();
  for (auto& value : values) {
    if (value < 0) value += limit;
  }
  return values;
}
}  // namespace

void take(const Tensor& x, const Tensor& indices, int axis, Tensor& out) {
  const AxisLines lines = lines_along(x.shape(), axis);
  const std::int64_t outer = lines.outer, length = lines.length, inner = lines.inner;
  std::vector<std::int64_t> index = normalized_indices(indices, length);
  std::int64_t count = static_cast<std::int64_t>(index.size());
  std::size_t row_bytes = static_cast<std::size_t>(inner) * dtype_size(x.dtype());
  auto* from = static_cast<const char*>(x.raw_data());
  auto* to = static_cast<char*>(out.raw_data());
  parallel_for(outer * count, std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(inner, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t flat = begin; flat < end; ++flat) {
                   std::int64_t o = flat / count, i = flat % count;
                   std::memcpy(to + flat * row_bytes,
                               from + (o * length + index[i]) * row_bytes, row_bytes);
                 }
               });
}

void take_gradient(const Tensor& output_gradient, const Tensor& indices, int axis,
                   Tensor& input_gradient) {
  fill(input_gradient, 0.0);
  const AxisLines lines = lines_along(input_gradient.shape(), axis);
  const std::int64_t outer = lines.outer, length = lines.length, inner = lines.inner;
  std::vector<std::int64_t> index = normalized_indices(indices, length);
  std::int64_t count = static_cast<std::int64_t>(index.size());
  dispatch_floating(output_gradient.dtype(), "take gradient", [&](auto zero) {
    using T = decltype(zero);
    const T* from = static_cast<const T*>(output_gradient.raw_data());
    T* to = static_cast<T*>(input_gradient.raw_data());
    // Parallel over outer only: two indices may hit the same row, so rows are summed in order.
    parallel_for(outer, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t o = begin; o < end; ++o) {
        for (std::int64_t i = 0; i < count; ++i) {
          const T* source = from + (o * count + i) * inner;
          T* destination = to + (o * length + index[i]) * inner;
          for (std::int64_t j = 0; j < inner; ++j) destination[j] += source[j];
        }
      }
    });
  });
}

void one_hot(const Tensor& indices, Tensor& out) {
  fill(out, 0.0);
  std::int64_t depth = out.shape().back();
  std::vector<std::int64_t> index = indices.to_vector<std::int64_t>();
  dispatch_dtype(out.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* data = static_cast<T*>(out.raw_data());
    for (std::size_t i = 0; i < index.size(); ++i) {
      if (index[i] >= 0 && index[i] < depth) data[i * depth + index[i]] = static_cast<T>(1);
    }
  });
}

}  // namespace keras::cpu
