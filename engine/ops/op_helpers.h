// Checks and small helpers that several op files share.
#pragma once
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/errors.h"
#include "engine/op_dispatch.h"
#include "engine/ops.h"

namespace keras::ops::detail {

inline void check_defined(const Tensor& x, const char* op, const char* argument) {
  if (!x.defined()) throw ValueError(str(op, ": argument '", argument, "' is an undefined Tensor"));
}

inline void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  if (a.device() != b.device()) {
    throw ValueError(str(op, ": inputs are on different devices (", a.device().to_string(),
                         " and ", b.device().to_string(), "); move them to one device first"));
  }
}

inline void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  if (a.dtype() != b.dtype()) {
    throw DTypeError(str(op, ": inputs have different dtypes (", dtype_name(a.dtype()), " and ",
                         dtype_name(b.dtype()), "); convert one with astype() first"));
  }
}

inline void check_floating(const Tensor& x, const char* op) {
  if (!is_floating(x.dtype())) {
    throw DTypeError(str(op, " expects a floating tensor (float32, float64, bfloat16 or float16), got ", dtype_name(x.dtype())));
  }
}

// op(a) @ op(b) with its gradient, op a transpose of the last two axes where asked: a and b of
// rank 2, or rank 3 with equal batch (checked by the caller). einsum uses it so that an
// operand laid out as [.., k, m] needs no transposed copy.
Tensor matmul_transposed(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b);

// Sums a broadcast gradient back down to `shape` (the inverse of broadcasting).
Tensor reduce_to_shape(const Tensor& gradient, const Shape& shape);

// Sorted, unique, normalised axes; empty input means all axes.
std::vector<int> normalize_axes(const Axes& axes, int rank, const char* op);

}  // namespace keras::ops::detail
