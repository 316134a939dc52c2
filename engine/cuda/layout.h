// GPU kernels that move elements: transpose, slices, take (gather) and its gradient, one_hot.
// Elements are moved as raw words of their size. take_gradient gives each thread one column of
// one outer row and walks the indices in order, so repeated indices add up in the same order
// as on the CPU, without atomics (deterministic; its parallelism is outer * inner, enough for
// the embedding gradients of a batch, and the place to look first if an embedding is slow).
#pragma once
#include "engine/cuda/kernels.h"

namespace keras::gpu_kernels {

template <typename Word>
struct StridedCopyBody {
  IndexMap<2> map;  // source, destination
  const Word* source;
  Word* destination;
  KERAS_HOST_DEVICE void operator()(std::int64_t i) const {
    std::int64_t at[2];
    map.offsets(i, at);
    destination[at[1]] = source[at[0]];
  }
};

template <class Launcher>
void strided_copy(Launcher& launcher, const Shape& shape,
                  const std::vector<std::int64_t>& source_strides,
                  const std::vector<std::int64_t>& destination_strides, const void* source,
                  void* destination, std::size_t element_bytes, const char* kernel) {
  IndexMap<2> map = index_map(make_plan<2>(shape, {source_strides, destination_strides}), kernel);
  dispatch_element_size(element_bytes, [&](auto zero) {
    using Word = decltype(zero);
    launcher.for_each(shape_size(shape),
                      StridedCopyBody<Word>{map, static_cast<const Word*>(source),
                                            static_cast<Word*>(destination)});
  });
}

inline std::int64_t offset_of(const Shape& starts, const std::vector<std::int64_t>& strides) {
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < starts.size(); ++i) offset += starts[i] * strides[i];
  return offset;
}

template <class Launcher>
void transpose(Launcher& launcher, const Tensor& x, const std::vector<int>& permutation,
               Tensor& out) {
  std::vector<std::int64_t> in_strides = row_major_strides(x.shape());
  std::vector<std::int64_t> source_strides(permutation.size());
  for (std::size_t i = 0; i < permutation.size(); ++i) source_strides[i] = in_strides[permutation[i]];
  strided_copy(launcher, out.shape(), source_strides, row_major_strides(out.shape()),
               x.raw_data(), out.raw_data(), dtype_size(x.dtype()), "transpose");
}

template <class Launcher>
void copy_slice(Launcher& launcher, const Tensor& x, const Shape& starts, Tensor& out) {
  std::vector<std::int64_t> strides = row_major_strides(x.shape());
  std::size_t bytes = dtype_size(x.dtype());
  strided_copy(launcher, out.shape(), strides, row_major_strides(out.shape()),
               static_cast<const char*>(x.raw_data()) + offset_of(starts, strides) * bytes,
               out.raw_data(), bytes, "slice");
}

template <class Launcher>
void write_slice(Launcher& launcher, const Tensor& source, const Shape& starts,
                 Tensor& destination) {
  std::vector<std::int64_t> strides = row_major_strides(destination.shape());
  std::size_t bytes = dtype_size(source.dtype());
  strided_copy(launcher, source.shape(), row_major_strides(source.shape()), strides,
               source.raw_data(),
               static_cast<char*>(destination.raw_data()) + offset_of(starts, strides) * bytes,
               bytes, "slice update");
}

// Index i of `indices` (int32 or int64), negative values counted from `limit`.
template <typename Index>
KERAS_HOST_DEVICE std::int64_t index_at(const Index* indices, std::int64_t i, std::int64_t limit) {
  auto value = static_cast<std::int64_t>(indices[i]);
  return value < 0 ? value + limit : value;
}

template <typename Word, typename Index>
struct TakeBody {
  const Word* x;
  const Index* indices;
  Word* out;
  std::int64_t length, count, inner;  // x is [outer, length, inner]; out [outer, count, inner]
  KERAS_HOST_DEVICE void operator()(std::int64_t flat) const {
    std::int64_t j = flat % inner;
    std::int64_t row = flat / inner;
    std::int64_t i = row % count, o = row / count;
    std::int64_t index = index_at(indices, i, length);
    // An index out of range was reported by check_indices; its row is left as zeros.
    out[flat] = index >= 0 && index < length ? x[(o * length + index) * inner + j] : Word{0};
  }
};

template <typename T, typename Index>
struct TakeGradientBody {
  const T* output_gradient;  // [outer, count, inner]
  const Index* indices;
  T* input_gradient;  // [outer, length, inner], zeroed
  std::int64_t length, count, inner;
  KERAS_HOST_DEVICE void operator()(std::int64_t flat) const {
    std::int64_t j = flat % inner, o = flat / inner;
    for (std::int64_t i = 0; i < count; ++i) {
      std::int64_t index = index_at(indices, i, length);
      if (index < 0 || index >= length) continue;  // reported by check_indices
      input_gradient[(o * length + index) * inner + j] += output_gradient[(o * count + i) * inner + j];
    }
  }
};

template <typename Index>
struct CheckIndicesBody {
  const Index* indices;
  IndexCheck check;
  ErrorReport* report;
  KERAS_HOST_DEVICE void operator()(std::int64_t i) const {
    auto index = static_cast<long long>(indices[i]);
    if (index < check.lower || index >= check.upper) {
      report_error(report, KernelError::index_out_of_range, index, check.message);
    }
  }
};


template <typename Fn>
decltype(auto) dispatch_index(DType dtype, Fn&& fn) {
  if (dtype == DType::int32) return fn(std::int32_t{});
  if (dtype == DType::int64) return fn(std::int64_t{});
  throw DTypeError(str("indices must be int32 or int64, got ", dtype_name(dtype)));
}

// Deferred: no wait here (engine/index_check.h).
template <class Launcher>
void check_indices(Launcher& launcher, const Tensor& indices, const IndexCheck& check) {
  dispatch_index(indices.dtype(), [&](auto index_zero) {
    using Index = decltype(index_zero);
    launcher.for_each(indices.size(),
                      CheckIndicesBody<Index>{static_cast<const Index*>(indices.raw_data()), check,
                                              launcher.error_report()});
  });
}

template <class Launcher>
void take(Launcher& launcher, const Tensor& x, const Tensor& indices, int axis, Tensor& out) {
  AxisLines split = lines_along(x.shape(), axis);
  std::int64_t count = indices.size();
  dispatch_element_size(dtype_size(x.dtype()), [&](auto word_zero) {
    using Word = decltype(word_zero);
    dispatch_index(indices.dtype(), [&](auto index_zero) {
      using Index = decltype(index_zero);
      launcher.for_each(out.size(), TakeBody<Word, Index>{static_cast<const Word*>(x.raw_data()),
                                                          static_cast<const Index*>(indices.raw_data()),
                                                          static_cast<Word*>(out.raw_data()),
                                                          split.length, count, split.inner});
    });
  });
}

template <class Launcher>
void take_gradient(Launcher& launcher, const Tensor& output_gradient, const Tensor& indices,
                   int axis, Tensor& input_gradient) {
  fill(launcher, input_gradient, 0.0);
  AxisLines split = lines_along(input_gradient.shape(), axis);
  std::int64_t count = indices.size();
  dispatch_floating(output_gradient.dtype(), "take gradient", [&](auto zero) {
    using T = decltype(zero);
    dispatch_index(indices.dtype(), [&](auto index_zero) {
      using Index = decltype(index_zero);
      launcher.for_each(split.outer * split.inner,
                        TakeGradientBody<T, Index>{
                            static_cast<const T*>(output_gradient.raw_data()),
                            static_cast<const Index*>(indices.raw_data()),
                            static_cast<T*>(input_gradient.raw_data()), split.length, count,
                            split.inner});
    });
  });
}

template <typename T, typename Index>
struct OneHotBody {
  const Index* indices;
  T* out;
  std::int64_t depth;
  KERAS_HOST_DEVICE void operator()(std::int64_t i) const {
    auto index = static_cast<std::int64_t>(indices[i]);
    // Out-of-range indices give an all-zero row, as in Keras/TensorFlow.
    if (index >= 0 && index < depth) out[i * depth + index] = static_cast<T>(1);
  }
};

template <class Launcher>
void one_hot(Launcher& launcher, const Tensor& indices, Tensor& out) {
  fill(launcher, out, 0.0);
  dispatch_dtype(out.dtype(), [&](auto zero) {
    using T = decltype(zero);
    dispatch_index(indices.dtype(), [&](auto index_zero) {
      using Index = decltype(index_zero);
      launcher.for_each(indices.size(),
                        OneHotBody<T, Index>{static_cast<const Index*>(indices.raw_data()),
                                             static_cast<T*>(out.raw_data()), out.shape().back()});
    });
  });
}

}  // namespace keras::gpu_kernels
