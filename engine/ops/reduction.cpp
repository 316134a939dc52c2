// Reductions (sum, mean, max, min, var, argmax, argmin) and their gradient rules.
#include <algorithm>

#include "engine/ops/op_helpers.h"

namespace keras::ops {
namespace detail {

std::vector<int> normalize_axes(const Axes& axes, int rank, const char* op) {
  std::vector<int> result;
  if (axes.empty()) {
    for (int i = 0; i < rank; ++i) result.push_back(i);
    return result;
  }
  for (std::int64_t axis : axes) result.push_back(normalize_axis(axis, rank, op));
  std::sort(result.begin(), result.end());
  if (std::adjacent_find(result.begin(), result.end()) != result.end()) {
    throw ValueError(str(op, ": an axis is repeated in the list of axes; each may appear once"));
  }
  return result;
}

}  // namespace detail

namespace {

Shape keepdims_shape(const Shape& shape, const std::vector<int>& axes) {
  Shape out = shape;
  for (int axis : axes) out[axis] = 1;
  return out;
}

Shape dropped_shape(const Shape& shape, const std::vector<int>& axes) {
  Shape out;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    if (std::find(axes.begin(), axes.end(), i) == axes.end()) out.push_back(shape[i]);
  }
  return out;
}

Tensor reduce_forward(ReduceOp op, const Tensor& x, const std::vector<int>& axes,
                      const char* name) {
  detail::check_defined(x, name, "x");
  if (x.dtype() == bool_) throw DTypeError(str(name, " is not defined on bool tensors"));
  if (op != ReduceOp::sum) {
    for (int axis : axes) {
      if (x.shape()[axis] == 0) {
        throw ValueError(str(name, ": cannot reduce an empty axis ", axis, " of shape ",
                             shape_to_string(x.shape())));
      }
    }
  }
  Tensor out = Tensor::empty(keepdims_shape(x.shape(), axes), x.dtype(), x.device());
  backend_for(x.device()).reduce(op, x, axes, out);
  return out;
}

// max and min send the gradient to every element equal to the extreme, split evenly among ties.
Tensor extreme(ReduceOp op, const Tensor& x, const Axes& axes_in, bool keepdims,
               const char* name) {
  std::vector<int> axes = detail::normalize_axes(axes_in, x.rank(), name);
  Tensor kept = reduce_forward(op, x, axes, name);
  Shape final_shape = keepdims ? kept.shape() : dropped_shape(x.shape(), axes);
  Tensor out = record_gradient(kept, name, {x}, [x, kept_saved = kept.detach(),
                                                 axes](const Tensor& g) {
    Tensor mask = cast(equal(x.detach(), kept_saved), g.dtype());
    Axes as_axes(axes.begin(), axes.end());
    Tensor count = sum(mask, as_axes, /*keepdims=*/true);
    return std::vector<Tensor>{g * mask / count};
  });
  return reshape(out, final_shape);
}

}  // namespace

Tensor sum(const Tensor& x, const Axes& axes_in, bool keepdims) {
  detail::check_defined(x, "sum", "x");
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"sum", OpFamily::reduction, {x},
                                    [axes_in, keepdims](const std::vector<Tensor>& local) { return sum(local[0], axes_in, keepdims); }, axes_in, keepdims});
  }
  std::vector<int> axes = detail::normalize_axes(axes_in, x.rank(), "sum");
  Tensor kept = reduce_forward(ReduceOp::sum, x, axes, "sum");
  kept = record_gradient(kept, "sum", {x}, [shape = x.shape()](const Tensor& g) {
    return std::vector<Tensor>{broadcast_to(g, shape)};
  });
  return keepdims ? kept : reshape(kept, dropped_shape(x.shape(), axes));
}

Tensor mean(const Tensor& x, const Axes& axes_in, bool keepdims) {
  detail::check_defined(x, "mean", "x");
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"mean", OpFamily::reduction, {x},
                                    [axes_in, keepdims](const std::vector<Tensor>& local) { return mean(local[0], axes_in, keepdims); }, axes_in, keepdims});
  }
  detail::check_floating(x, "mean");
  std::vector<int> axes = detail::normalize_axes(axes_in, x.rank(), "mean");
  std::int64_t count = 1;
  for (int axis : axes) count *= x.shape()[axis];
  // The mean of no elements is NaN (0 * inf), as in NumPy.
  return sum(x, axes_in, keepdims) * (1.0 / static_cast<double>(count));
}

Tensor batch_mean(const Tensor& x, const Axes& axes, bool keepdims) {
  detail::check_defined(x, "batch_mean", "x");
  std::vector<int> normal = detail::normalize_axes(axes, x.rank(), "batch_mean");
  if (std::find(normal.begin(), normal.end(), 0) == normal.end()) {
    throw ValueError(str("batch_mean: the axes ", shape_to_string(axes), " of a tensor of shape ",
                         shape_to_string(x.shape()), " must include 0, the batch"));
  }
  // With a handler installed the mean always goes through it, annotated or not: an
  // unannotated activation under DataParallel is this process's rows of the global batch.
  if (sharded_op_handler() != nullptr) {
    return detail::through_handler({"batch_mean", OpFamily::batch, {x},
                                    [axes, keepdims](const std::vector<Tensor>& local) { return mean(local[0], axes, keepdims); },
                                    axes, keepdims});
  }
  return mean(x, axes, keepdims);
}

Tensor var(const Tensor& x, const Axes& axes, bool keepdims) {
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"var", OpFamily::reduction, {x},
                                    [axes, keepdims](const std::vector<Tensor>& local) { return var(local[0], axes, keepdims); }, axes, keepdims});
  }
  Tensor centered = x - mean(x, axes, /*keepdims=*/true);
  return mean(square(centered), axes, keepdims);
}

Tensor max(const Tensor& x, const Axes& axes, bool keepdims) {
  detail::check_defined(x, "max", "x");
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"max", OpFamily::reduction, {x},
                                    [axes, keepdims](const std::vector<Tensor>& local) { return max(local[0], axes, keepdims); }, axes, keepdims});
  }
  return extreme(ReduceOp::max, x, axes, keepdims, "max");
}

Tensor min(const Tensor& x, const Axes& axes, bool keepdims) {
  detail::check_defined(x, "min", "x");
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"min", OpFamily::reduction, {x},
                                    [axes, keepdims](const std::vector<Tensor>& local) { return min(local[0], axes, keepdims); }, axes, keepdims});
  }
  return extreme(ReduceOp::min, x, axes, keepdims, "min");
}

namespace {
Tensor arg_extreme(bool largest, const Tensor& x, std::int64_t axis_in, const char* name) {
  detail::check_defined(x, name, "x");
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({name, OpFamily::along_axis, {x},
                                    [largest, axis_in, name](const std::vector<Tensor>& local) { return arg_extreme(largest, local[0], axis_in, name); }, {axis_in}});
  }
  if (x.rank() == 0) throw ValueError(str(name, " needs a tensor of rank >= 1, got a scalar"));
  int axis = normalize_axis(axis_in, x.rank(), name);
  if (x.shape()[axis] == 0) {
    throw ValueError(str(name, ": axis ", axis, " of shape ", shape_to_string(x.shape()),
                         " is empty"));
  }
  Tensor out = Tensor::empty(dropped_shape(x.shape(), {axis}), int64, x.device());
  backend_for(x.device()).arg_reduce(largest, x, axis, out);
  return out;
}
}  // namespace

Tensor argmax(const Tensor& x, std::int64_t axis) { return arg_extreme(true, x, axis, "argmax"); }
Tensor argmin(const Tensor& x, std::int64_t axis) {
  return arg_extreme(false, x, axis, "argmin");
}

}  // namespace keras::ops
