// Matrix multiplication and its gradient rule. The backward pass uses the kernel's transpose
// flags (g @ bᵀ, aᵀ @ g) rather than materialising transposes: at batch 128 on the MLP
// benchmark a transpose copy of a 1024x1024 kernel costs about as much as a third of its GEMM.
#include "engine/ops/op_helpers.h"

namespace keras::ops {
namespace {

// The kernel-level product with transpose flags; a, b of rank 2, or rank 3 with equal batch.
Tensor matmul_kernel(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  int r = a.rank();
  std::int64_t rows = transpose_a ? a.shape()[r - 1] : a.shape()[r - 2];
  std::int64_t cols = transpose_b ? b.shape()[r - 2] : b.shape()[r - 1];
  Shape shape = r == 3 ? Shape{a.shape()[0], rows, cols} : Shape{rows, cols};
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  backend_for(a.device()).matmul(a, b, transpose_a, transpose_b, out);
  return out;
}

}  // namespace

// out = op(a) @ op(b). The gradients are products of g with the other operand, each in the
// orientation that needs no transposed copy:
//   a @ b:   da = g @ bᵀ,   db = aᵀ @ g        a @ bᵀ:   da = g @ b,    db = gᵀ @ a
//   aᵀ @ b:  da = b @ gᵀ,   db = a @ g         aᵀ @ bᵀ:  da = bᵀ @ gᵀ,  db = gᵀ @ aᵀ
Tensor detail::matmul_transposed(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  Tensor out = matmul_kernel(a, b, transpose_a, transpose_b);
  return record_gradient(out, "matmul", {a, b}, [a, b, transpose_a, transpose_b](const Tensor& g) {
    bool need_a = a.requires_grad() || a.gradient_node();
    bool need_b = b.requires_grad() || b.gradient_node();
    Tensor da, db;
    if (!transpose_a && !transpose_b) {
      if (need_a) da = matmul_kernel(g, b, false, true);
      if (need_b) db = matmul_kernel(a, g, true, false);
    } else if (!transpose_a) {
      if (need_a) da = matmul_kernel(g, b, false, false);
      if (need_b) db = matmul_kernel(g, a, true, false);
    } else if (!transpose_b) {
      if (need_a) da = matmul_kernel(b, g, false, true);
      if (need_b) db = matmul_kernel(a, g, false, false);
    } else {
      if (need_a) da = matmul_kernel(b, g, true, true);
      if (need_b) db = matmul_kernel(g, a, true, true);
    }
    return std::vector<Tensor>{da, db};
  });
}

namespace {
Tensor matmul_recorded(const Tensor& a, const Tensor& b) { return detail::matmul_transposed(a, b, false, false); }
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (detail::goes_through_handler({&a, &b})) {
    return detail::through_handler({"matmul", OpFamily::contraction, {a, b},
                                    [](const std::vector<Tensor>& local) { return matmul(local[0], local[1]); }});
  }
  detail::check_defined(a, "matmul", "a");
  detail::check_defined(b, "matmul", "b");
  detail::check_same_device(a, b, "matmul");
  detail::check_same_dtype(a, b, "matmul");
  detail::check_floating(a, "matmul");
  if (a.rank() < 2 || b.rank() < 2) {
    throw ShapeError(str("matmul needs inputs of rank >= 2, got shapes ",
                         shape_to_string(a.shape()), " and ", shape_to_string(b.shape())));
  }
  std::int64_t inner_a = a.shape().back();
  std::int64_t inner_b = b.shape()[b.rank() - 2];
  if (inner_a != inner_b) {
    throw ShapeError(str("matmul: shapes ", shape_to_string(a.shape()), " and ",
                         shape_to_string(b.shape()), " do not fit: the last dimension of a (",
                         inner_a, ") must equal the second-to-last of b (", inner_b, ")"));
  }
  if (b.rank() == 2) {
    if (a.rank() == 2) return matmul_recorded(a, b);
    // Every leading dimension of a is a row: fold them, multiply once, unfold.
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);
    out_shape.push_back(b.shape()[1]);
    Tensor rows = reshape(a, {-1, inner_a});
    return reshape(matmul_recorded(rows, b), out_shape);
  }
  Shape batch_a(a.shape().begin(), a.shape().end() - 2);
  Shape batch_b(b.shape().begin(), b.shape().end() - 2);
  if (batch_a != batch_b) {
    throw ShapeError(str("matmul: batch dimensions ", shape_to_string(batch_a), " and ",
                         shape_to_string(batch_b), " differ; batched matmul needs equal batch "
                         "dimensions (broadcast them first with broadcast_to)"));
  }
  std::int64_t batch = shape_size(batch_a);
  Tensor a3 = reshape(a, {batch, a.shape()[a.rank() - 2], inner_a});
  Tensor b3 = reshape(b, {batch, inner_b, b.shape().back()});
  Shape out_shape = batch_a;
  out_shape.push_back(a.shape()[a.rank() - 2]);
  out_shape.push_back(b.shape().back());
  return reshape(matmul_recorded(a3, b3), out_shape);
}

}  // namespace keras::ops
