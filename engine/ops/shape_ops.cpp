// Ops that move or select elements: reshape, transpose, expand_dims, squeeze, broadcast_to,
// slice, concatenate, take, one_hot, and their gradient rules.
#include <algorithm>
#include <numeric>

#include "engine/ops/op_helpers.h"

namespace keras::ops {

Tensor reshape(const Tensor& x, const Shape& shape_in) {
  detail::check_defined(x, "reshape", "x");
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"reshape", OpFamily::reshape, {x},
                                    [shape_in](const std::vector<Tensor>& local) { return reshape(local[0], shape_in); },
                                    {}, false, {}, shape_in});
  }
  Shape shape = shape_in;
  int unknown = -1;
  std::int64_t known = 1;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    if (shape[i] == -1) {
      if (unknown >= 0) {
        throw ValueError(str("reshape: target shape ", shape_to_string(shape_in),
                             " has more than one -1; at most one dimension can be inferred"));
      }
      unknown = i;
    } else if (shape[i] < 0) {
      throw ValueError(str("reshape: target shape ", shape_to_string(shape_in),
                           " has a negative dimension other than -1"));
    } else {
      known *= shape[i];
    }
  }
  if (unknown >= 0) {
    if (known == 0 || x.size() % known != 0) {
      throw ShapeError(str("reshape: cannot reshape ", shape_to_string(x.shape()), " (",
                           x.size(), " elements) into ", shape_to_string(shape_in)));
    }
    shape[unknown] = x.size() / known;
  }
  if (shape_size(shape) != x.size()) {
    throw ShapeError(str("reshape: cannot reshape ", shape_to_string(x.shape()), " (", x.size(),
                         " elements) into ", shape_to_string(shape_in), " (", shape_size(shape),
                         " elements)"));
  }
  if (shape == x.shape()) return x;
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = x.impl()->storage;  // shares the data: reshape never copies
  impl->shape = shape;
  impl->dtype = x.dtype();
  return record_gradient(Tensor(std::move(impl)), "reshape", {x},
                         [original = x.shape()](const Tensor& g) {
                           return std::vector<Tensor>{reshape(g, original)};
                         });
}

Tensor transpose(const Tensor& x, const std::vector<std::int64_t>& permutation_in) {
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"transpose", OpFamily::transpose, {x},
                                    [permutation_in](const std::vector<Tensor>& local) { return transpose(local[0], permutation_in); }, permutation_in});
  }
  detail::check_defined(x, "transpose", "x");
  int rank = x.rank();
  std::vector<int> permutation(rank);
  if (permutation_in.empty()) {
    for (int i = 0; i < rank; ++i) permutation[i] = rank - 1 - i;
  } else {
    if (static_cast<int>(permutation_in.size()) != rank) {
      throw ValueError(str("transpose: got a permutation of ", permutation_in.size(),
                           " axes for a tensor of rank ", rank));
    }
    std::vector<bool> seen(rank, false);
    for (int i = 0; i < rank; ++i) {
      permutation[i] = normalize_axis(permutation_in[i], rank, "transpose");
      if (seen[permutation[i]]) {
        throw ValueError(str("transpose: axis ", permutation[i],
                             " appears twice; the permutation must list every axis once"));
      }
      seen[permutation[i]] = true;
    }
  }
  Shape shape(rank);
  for (int i = 0; i < rank; ++i) shape[i] = x.shape()[permutation[i]];
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  backend_for(x.device()).transpose(x, permutation, out);
  std::vector<std::int64_t> inverse(rank);
  for (int i = 0; i < rank; ++i) inverse[permutation[i]] = i;
  return record_gradient(out, "transpose", {x}, [inverse](const Tensor& g) {
    return std::vector<Tensor>{transpose(g, inverse)};
  });
}

Tensor expand_dims(const Tensor& x, std::int64_t axis_in) {
  detail::check_defined(x, "expand_dims", "x");
  // A reshape of the shape the caller sees (global on a sharded tensor): the reshape rule applies.
  int axis = normalize_axis(axis_in, x.rank() + 1, "expand_dims");
  Shape shape = x.shape();
  shape.insert(shape.begin() + axis, 1);
  return reshape(x, shape);
}

Tensor squeeze(const Tensor& x, std::int64_t axis_in) {
  detail::check_defined(x, "squeeze", "x");
  // A reshape of the shape the caller sees (global on a sharded tensor): the reshape rule applies.
  int axis = normalize_axis(axis_in, x.rank(), "squeeze");
  if (x.shape()[axis] != 1) {
    throw ShapeError(str("squeeze: axis ", axis, " of shape ", shape_to_string(x.shape()),
                         " has size ", x.shape()[axis], "; only a size-1 axis can be removed"));
  }
  Shape shape = x.shape();
  shape.erase(shape.begin() + axis);
  return reshape(x, shape);
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  detail::check_defined(x, "broadcast_to", "x");
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"broadcast_to", OpFamily::broadcast, {x},
                                    [shape](const std::vector<Tensor>& local) { return broadcast_to(local[0], shape); },
                                    {}, false, {}, shape});
  }
  Shape result = broadcast_shapes(x.shape(), shape, "broadcast_to");
  if (result != shape) {
    throw ShapeError(str("broadcast_to: cannot broadcast ", shape_to_string(x.shape()), " to ",
                         shape_to_string(shape)));
  }
  if (x.shape() == shape) return x;
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  Tensor zero = Tensor::zeros({}, x.dtype(), x.device());
  if (x.dtype() == bool_) {
    backend_for(x.device()).binary(BinaryOp::logical_or, x, zero, out);
  } else {
    backend_for(x.device()).binary(BinaryOp::add, x, zero, out);
  }
  return record_gradient(out, "broadcast_to", {x}, [original = x.shape()](const Tensor& g) {
    return std::vector<Tensor>{detail::reduce_to_shape(g, original)};
  });
}

Tensor slice(const Tensor& x, const Shape& starts, const Shape& sizes_in) {
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"slice", OpFamily::slice, {x},
                                    [starts, sizes_in](const std::vector<Tensor>& local) { return slice(local[0], starts, sizes_in); },
                                    starts, false, {}, sizes_in});
  }
  detail::check_defined(x, "slice", "x");
  int rank = x.rank();
  if (static_cast<int>(starts.size()) != rank || static_cast<int>(sizes_in.size()) != rank) {
    throw ValueError(str("slice: got ", starts.size(), " starts and ", sizes_in.size(),
                         " sizes for a tensor of rank ", rank, "; expected one of each per axis"));
  }
  Shape sizes = sizes_in;
  for (int i = 0; i < rank; ++i) {
    if (sizes[i] == -1) sizes[i] = x.shape()[i] - starts[i];
    if (starts[i] < 0 || sizes[i] < 0 || starts[i] + sizes[i] > x.shape()[i]) {
      throw ValueError(str("slice: the block starting at ", shape_to_string(starts),
                           " with sizes ", shape_to_string(sizes_in),
                           " does not lie inside shape ", shape_to_string(x.shape())));
    }
  }
  Tensor out = Tensor::empty(sizes, x.dtype(), x.device());
  backend_for(x.device()).copy_slice(x, starts, out);
  return record_gradient(out, "slice", {x}, [starts, shape = x.shape()](const Tensor& g) {
    Tensor full = Tensor::zeros(shape, g.dtype(), g.device());
    backend_for(g.device()).write_slice(g, starts, full);
    return std::vector<Tensor>{full};
  });
}

Tensor concatenate(const std::vector<Tensor>& tensors, std::int64_t axis_in) {
  if (tensors.empty()) throw ValueError("concatenate: got no tensors; expected at least one");
  for (const Tensor& tensor : tensors) detail::check_defined(tensor, "concatenate", "tensors");
  if (detail::goes_through_handler(tensors)) {
    return detail::through_handler({"concatenate", OpFamily::concatenate, tensors,
                                    [axis_in](const std::vector<Tensor>& local) { return concatenate(local, axis_in); }, {axis_in}});
  }
  const Tensor& first = tensors[0];
  if (first.rank() == 0) throw ValueError("concatenate: scalars cannot be concatenated");
  int axis = normalize_axis(axis_in, first.rank(), "concatenate");
  Shape shape = first.shape();
  shape[axis] = 0;
  for (const Tensor& tensor : tensors) {
    detail::check_same_device(first, tensor, "concatenate");
    detail::check_same_dtype(first, tensor, "concatenate");
    bool fits = tensor.rank() == first.rank();
    for (int i = 0; fits && i < first.rank(); ++i) {
      fits = i == axis || tensor.shape()[i] == first.shape()[i];
    }
    if (!fits) {
      throw ShapeError(str("concatenate: shapes ", shape_to_string(first.shape()), " and ",
                           shape_to_string(tensor.shape()),
                           " must match on every axis except ", axis));
    }
    shape[axis] += tensor.shape()[axis];
  }
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  Shape starts(first.rank(), 0);
  std::vector<std::int64_t> offsets;
  for (const Tensor& tensor : tensors) {
    offsets.push_back(starts[axis]);
    backend_for(out.device()).write_slice(tensor, starts, out);
    starts[axis] += tensor.shape()[axis];
  }
  std::vector<Shape> shapes;
  for (const Tensor& tensor : tensors) shapes.push_back(tensor.shape());
  return record_gradient(out, "concatenate", tensors, [axis, offsets, shapes](const Tensor& g) {
    std::vector<Tensor> gradients;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      Shape begin(g.rank(), 0);
      begin[axis] = offsets[i];
      gradients.push_back(slice(g, begin, shapes[i]));
    }
    return gradients;
  });
}

void check_indices(const Tensor& indices, std::int64_t lower, std::int64_t upper,
                   const std::string& message) {
  detail::check_defined(indices, "check_indices", "indices");
  if (indices.dtype() != int32 && indices.dtype() != int64) {
    throw DTypeError(str("check_indices: indices must be int32 or int64, got ",
                         dtype_name(indices.dtype())));
  }
  if (indices.size() == 0) return;
  backend_for(indices.device()).check_indices(indices, make_index_check(lower, upper, message));
}

namespace {
void check_take_indices(const Tensor& indices, std::int64_t limit, const char* op) {
  if (indices.dtype() != int32 && indices.dtype() != int64) {
    throw DTypeError(str(op, ": indices must be int32 or int64, got ",
                         dtype_name(indices.dtype())));
  }
  check_indices(indices, -limit, limit,
                str(op, ": index {} is out of range; expected values in [", -limit, ", ", limit, ")"));
}
}  // namespace

Tensor take(const Tensor& x, const Tensor& indices, std::int64_t axis_in) {
  detail::check_defined(x, "take", "x");
  detail::check_defined(indices, "take", "indices");
  if (detail::goes_through_handler({&x, &indices})) {
    return detail::through_handler({"take", OpFamily::lookup, {x, indices},
                                    [axis_in](const std::vector<Tensor>& local) { return take(local[0], local[1], axis_in); },
                                    {axis_in}});
  }
  detail::check_same_device(x, indices, "take");
  if (x.rank() == 0) throw ValueError("take: cannot index a scalar");
  int axis = normalize_axis(axis_in, x.rank(), "take");
  check_take_indices(indices, x.shape()[axis], "take");
  Shape shape(x.shape().begin(), x.shape().begin() + axis);
  shape.insert(shape.end(), indices.shape().begin(), indices.shape().end());
  shape.insert(shape.end(), x.shape().begin() + axis + 1, x.shape().end());
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  backend_for(x.device()).take(x, indices, axis, out);
  return record_gradient(out, "take", {x}, [indices, axis, original = x.shape()](const Tensor& g) {
    Tensor input_gradient = Tensor::empty(original, g.dtype(), g.device());
    backend_for(g.device()).take_gradient(g, indices, axis, input_gradient);
    return std::vector<Tensor>{input_gradient};
  });
}

Tensor one_hot(const Tensor& indices, std::int64_t depth, DType dtype) {
  detail::check_defined(indices, "one_hot", "indices");
  if (detail::goes_through_handler({&indices})) {
    return detail::through_handler({"one_hot", OpFamily::one_hot, {indices},
                                    [depth, dtype](const std::vector<Tensor>& local) { return one_hot(local[0], depth, dtype); },
                                    {}, false, {}, {depth}});
  }
  if (depth <= 0) throw ValueError(str("one_hot: depth must be positive, got ", depth));
  if (indices.dtype() != int32 && indices.dtype() != int64) {
    throw DTypeError(str("one_hot: indices must be int32 or int64, got ",
                         dtype_name(indices.dtype())));
  }
  Shape shape = indices.shape();
  shape.push_back(depth);
  Tensor out = Tensor::empty(shape, dtype, indices.device());
  // Out-of-range indices give an all-zero row, as in Keras/TensorFlow.
  backend_for(indices.device()).one_hot(indices, out);
  return out;
}

}  // namespace keras::ops
