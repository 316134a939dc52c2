// Element-wise ops (unary, binary with broadcasting, where, cast) and their gradient rules.
#include <cmath>

#include "engine/ops/op_helpers.h"

namespace keras::ops {
namespace detail {

Tensor reduce_to_shape(const Tensor& gradient, const Shape& shape) {
  if (gradient.shape() == shape) return gradient;
  int extra = gradient.rank() - static_cast<int>(shape.size());
  Axes axes;
  for (int i = 0; i < gradient.rank(); ++i) {
    if (i < extra || (shape[i - extra] == 1 && gradient.shape()[i] != 1)) axes.push_back(i);
  }
  Tensor summed = axes.empty() ? gradient : sum(gradient, axes, /*keepdims=*/true);
  return reshape(summed, shape);
}

}  // namespace detail

using detail::check_defined;
using detail::reduce_to_shape;

namespace {

// With no sharded-op handler installed (code computing on local blocks itself, op_dispatch.h),
// element-wise outputs keep the annotation of the input they are shaped like (a sharded
// activation stays sharded through relu or a dropout mask). Two inputs annotated differently
// give an unannotated output: the engine cannot tell which (if either) is right.
void inherit_annotation(Tensor& out, const Tensor& a, const Tensor* b = nullptr) {
  const auto& first = a.annotation();
  const auto& second = b ? b->annotation() : a.annotation();
  if (!first && !second) return;
  if (first && second && first != second && !first->equals(*second)) return;
  if (first && a.shape() == out.shape()) {
    out.set_annotation(first);
  } else if (second && b && b->shape() == out.shape()) {
    out.set_annotation(second);
  }
}

Tensor unary_forward(UnaryOp op, const Tensor& x) {
  check_defined(x, unary_op_name(op), "x");
  if (op == UnaryOp::logical_not) {
    if (x.dtype() != bool_) {
      throw DTypeError(str("logical_not expects a bool tensor, got ", dtype_name(x.dtype())));
    }
  } else if (x.dtype() == bool_) {
    throw DTypeError(str(unary_op_name(op), " is not defined on bool tensors"));
  }
  if (unary_op_is_floating_only(op)) detail::check_floating(x, unary_op_name(op));
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend_for(x.device()).unary(op, x, out);
  inherit_annotation(out, x);
  return out;
}

// Gradient rule shared by the activations whose derivative the backend computes fused.
Tensor fused_unary(UnaryOp op, const Tensor& x) {
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({unary_op_name(op), OpFamily::elementwise, {x}, [op](const std::vector<Tensor>& local) { return fused_unary(op, local[0]); }});
  }
  Tensor out = unary_forward(op, x);
  return record_gradient(out, unary_op_name(op), {x}, [op, x](const Tensor& gradient) {
    Tensor input_gradient = Tensor::empty(x.shape(), x.dtype(), x.device());
    backend_for(x.device()).unary_gradient(op, x, gradient, input_gradient);
    return std::vector<Tensor>{input_gradient};
  });
}

Shape binary_shape(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op, "a");
  check_defined(b, op, "b");
  detail::check_same_device(a, b, op);
  detail::check_same_dtype(a, b, op);
  return broadcast_shapes(a.shape(), b.shape(), op);
}

Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b, DType out_dtype) {
  Shape shape = binary_shape(a, b, binary_op_name(op));
  Tensor out = Tensor::empty(shape, out_dtype, a.device());
  backend_for(a.device()).binary(op, a, b, out);
  inherit_annotation(out, a, &b);
  return out;
}

Tensor arithmetic(BinaryOp op, const Tensor& a, const Tensor& b) {
  check_defined(a, binary_op_name(op), "a");
  if (a.dtype() == bool_) {
    throw DTypeError(str(binary_op_name(op), " is not defined on bool tensors"));
  }
  return binary_forward(op, a, b, a.dtype());
}

Tensor comparison(BinaryOp op, const Tensor& a, const Tensor& b) {
  if (detail::goes_through_handler({&a, &b})) {
    return detail::through_handler({binary_op_name(op), OpFamily::elementwise, {a, b}, [op](const std::vector<Tensor>& local) { return comparison(op, local[0], local[1]); }});
  }
  return binary_forward(op, a, b, bool_);
}

Tensor logical(BinaryOp op, const Tensor& a, const Tensor& b) {
  if (detail::goes_through_handler({&a, &b})) {
    return detail::through_handler({binary_op_name(op), OpFamily::elementwise, {a, b}, [op](const std::vector<Tensor>& local) { return logical(op, local[0], local[1]); }});
  }
  check_defined(a, binary_op_name(op), "a");
  if (a.dtype() != bool_) {
    throw DTypeError(str(binary_op_name(op), " expects bool tensors, got ",
                         dtype_name(a.dtype())));
  }
  return binary_forward(op, a, b, bool_);
}

}  // namespace

Tensor scalar_like(const Tensor& x, double value) {
  return Tensor::full({}, value, x.dtype(), x.device());
}

Tensor cast(const Tensor& x, DType dtype) {
  check_defined(x, "cast", "x");
  if (x.dtype() == dtype) return x;
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"cast", OpFamily::elementwise, {x}, [dtype](const std::vector<Tensor>& local) { return cast(local[0], dtype); }});
  }
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  backend_for(x.device()).cast(x, out);
  inherit_annotation(out, x);
  if (!is_floating(dtype) || !is_floating(x.dtype())) return out;
  DType source = x.dtype();
  return record_gradient(out, "cast", {x}, [source](const Tensor& gradient) {
    return std::vector<Tensor>{cast(gradient, source)};
  });
}

Tensor negative(const Tensor& x) {
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"negative", OpFamily::elementwise, {x}, [](const std::vector<Tensor>& local) { return negative(local[0]); }});
  }
  return record_gradient(unary_forward(UnaryOp::negative, x), "negative", {x},
                         [](const Tensor& g) { return std::vector<Tensor>{negative(g)}; });
}

Tensor abs(const Tensor& x) {
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"abs", OpFamily::elementwise, {x}, [](const std::vector<Tensor>& local) { return abs(local[0]); }});
  }
  return record_gradient(unary_forward(UnaryOp::abs, x), "abs", {x}, [x](const Tensor& g) {
    return std::vector<Tensor>{g * sign(x)};
  });
}

Tensor sign(const Tensor& x) {
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"sign", OpFamily::elementwise, {x}, [](const std::vector<Tensor>& local) { return sign(local[0]); }});
  }
  return unary_forward(UnaryOp::sign, x);
}

Tensor exp(const Tensor& x) {
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"exp", OpFamily::elementwise, {x}, [](const std::vector<Tensor>& local) { return exp(local[0]); }});
  }
  Tensor out = unary_forward(UnaryOp::exp, x);
  Tensor saved = out.detach();
  return record_gradient(out, "exp", {x}, [saved](const Tensor& g) {
    return std::vector<Tensor>{g * saved};
  });
}

Tensor log(const Tensor& x) {
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"log", OpFamily::elementwise, {x}, [](const std::vector<Tensor>& local) { return log(local[0]); }});
  }
  return record_gradient(unary_forward(UnaryOp::log, x), "log", {x}, [x](const Tensor& g) {
    return std::vector<Tensor>{g / x.detach()};
  });
}

Tensor sqrt(const Tensor& x) {
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"sqrt", OpFamily::elementwise, {x}, [](const std::vector<Tensor>& local) { return sqrt(local[0]); }});
  }
  Tensor out = unary_forward(UnaryOp::sqrt, x);
  Tensor saved = out.detach();
  return record_gradient(out, "sqrt", {x}, [saved](const Tensor& g) {
    return std::vector<Tensor>{g / (saved * 2.0)};
  });
}

Tensor rsqrt(const Tensor& x) {
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"rsqrt", OpFamily::elementwise, {x}, [](const std::vector<Tensor>& local) { return rsqrt(local[0]); }});
  }
  Tensor out = unary_forward(UnaryOp::rsqrt, x);
  Tensor saved = out.detach();
  return record_gradient(out, "rsqrt", {x}, [saved](const Tensor& g) {
    return std::vector<Tensor>{g * saved * saved * saved * -0.5};
  });
}

Tensor square(const Tensor& x) {
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"square", OpFamily::elementwise, {x}, [](const std::vector<Tensor>& local) { return square(local[0]); }});
  }
  return record_gradient(unary_forward(UnaryOp::square, x), "square", {x},
                         [x](const Tensor& g) {
                           return std::vector<Tensor>{g * x.detach() * 2.0};
                         });
}

Tensor reciprocal(const Tensor& x) {
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"reciprocal", OpFamily::elementwise, {x}, [](const std::vector<Tensor>& local) { return reciprocal(local[0]); }});
  }
  Tensor out = unary_forward(UnaryOp::reciprocal, x);
  Tensor saved = out.detach();
  return record_gradient(out, "reciprocal", {x}, [saved](const Tensor& g) {
    return std::vector<Tensor>{-(g * saved * saved)};
  });
}

Tensor tanh(const Tensor& x) { return fused_unary(UnaryOp::tanh, x); }
Tensor sigmoid(const Tensor& x) { return fused_unary(UnaryOp::sigmoid, x); }
Tensor relu(const Tensor& x) { return fused_unary(UnaryOp::relu, x); }
Tensor gelu(const Tensor& x) { return fused_unary(UnaryOp::gelu, x); }
Tensor gelu_approximate(const Tensor& x) { return fused_unary(UnaryOp::gelu_approximate, x); }
Tensor silu(const Tensor& x) { return fused_unary(UnaryOp::silu, x); }
Tensor logical_not(const Tensor& x) {
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({"logical_not", OpFamily::elementwise, {x}, [](const std::vector<Tensor>& local) { return logical_not(local[0]); }});
  }
  return unary_forward(UnaryOp::logical_not, x);
}

Tensor add(const Tensor& a, const Tensor& b) {
  if (detail::goes_through_handler({&a, &b})) {
    return detail::through_handler({"add", OpFamily::elementwise, {a, b}, [](const std::vector<Tensor>& local) { return add(local[0], local[1]); }});
  }
  Tensor out = arithmetic(BinaryOp::add, a, b);
  return record_gradient(out, "add", {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
    return std::vector<Tensor>{reduce_to_shape(g, sa), reduce_to_shape(g, sb)};
  });
}

Tensor subtract(const Tensor& a, const Tensor& b) {
  if (detail::goes_through_handler({&a, &b})) {
    return detail::through_handler({"subtract", OpFamily::elementwise, {a, b}, [](const std::vector<Tensor>& local) { return subtract(local[0], local[1]); }});
  }
  Tensor out = arithmetic(BinaryOp::subtract, a, b);
  return record_gradient(out, "subtract", {a, b},
                         [sa = a.shape(), sb = b.shape()](const Tensor& g) {
                           return std::vector<Tensor>{reduce_to_shape(g, sa),
                                                      reduce_to_shape(negative(g), sb)};
                         });
}

Tensor multiply(const Tensor& a, const Tensor& b) {
  if (detail::goes_through_handler({&a, &b})) {
    return detail::through_handler({"multiply", OpFamily::elementwise, {a, b}, [](const std::vector<Tensor>& local) { return multiply(local[0], local[1]); }});
  }
  Tensor out = arithmetic(BinaryOp::multiply, a, b);
  return record_gradient(out, "multiply", {a, b}, [a, b](const Tensor& g) {
    return std::vector<Tensor>{
        a.requires_grad() || a.gradient_node() ? reduce_to_shape(g * b.detach(), a.shape())
                                               : Tensor(),
        b.requires_grad() || b.gradient_node() ? reduce_to_shape(g * a.detach(), b.shape())
                                               : Tensor()};
  });
}

Tensor divide(const Tensor& a, const Tensor& b) {
  if (detail::goes_through_handler({&a, &b})) {
    return detail::through_handler({"divide", OpFamily::elementwise, {a, b}, [](const std::vector<Tensor>& local) { return divide(local[0], local[1]); }});
  }
  Tensor out = arithmetic(BinaryOp::divide, a, b);
  return record_gradient(out, "divide", {a, b}, [a, b](const Tensor& g) {
    Tensor bd = b.detach();
    Tensor ga = g / bd;
    Tensor gb = b.requires_grad() || b.gradient_node()
                    ? reduce_to_shape(negative(ga * a.detach() / bd), b.shape())
                    : Tensor();
    return std::vector<Tensor>{reduce_to_shape(ga, a.shape()), gb};
  });
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  if (detail::goes_through_handler({&a, &b})) {
    return detail::through_handler({"maximum", OpFamily::elementwise, {a, b}, [](const std::vector<Tensor>& local) { return maximum(local[0], local[1]); }});
  }
  Tensor out = arithmetic(BinaryOp::maximum, a, b);
  return record_gradient(out, "maximum", {a, b}, [a, b](const Tensor& g) {
    // Ties send the gradient to a, as in TensorFlow and JAX.
    Tensor mask_a = cast(greater_equal(a.detach(), b.detach()), g.dtype());
    return std::vector<Tensor>{reduce_to_shape(g * mask_a, a.shape()),
                               reduce_to_shape(g * (1.0 - mask_a), b.shape())};
  });
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  if (detail::goes_through_handler({&a, &b})) {
    return detail::through_handler({"minimum", OpFamily::elementwise, {a, b}, [](const std::vector<Tensor>& local) { return minimum(local[0], local[1]); }});
  }
  Tensor out = arithmetic(BinaryOp::minimum, a, b);
  return record_gradient(out, "minimum", {a, b}, [a, b](const Tensor& g) {
    Tensor mask_a = cast(less_equal(a.detach(), b.detach()), g.dtype());
    return std::vector<Tensor>{reduce_to_shape(g * mask_a, a.shape()),
                               reduce_to_shape(g * (1.0 - mask_a), b.shape())};
  });
}

Tensor power(const Tensor& a, const Tensor& b) {
  if (detail::goes_through_handler({&a, &b})) {
    return detail::through_handler({"power", OpFamily::elementwise, {a, b}, [](const std::vector<Tensor>& local) { return power(local[0], local[1]); }});
  }
  Tensor out = arithmetic(BinaryOp::power, a, b);
  Tensor saved = out.detach();
  return record_gradient(out, "power", {a, b}, [a, b, saved](const Tensor& g) {
    Tensor ad = a.detach();
    Tensor bd = b.detach();
    Tensor ga = reduce_to_shape(g * bd * power(ad, bd - 1.0), a.shape());
    Tensor gb = b.requires_grad() || b.gradient_node()
                    ? reduce_to_shape(g * saved * log(ad), b.shape())
                    : Tensor();
    return std::vector<Tensor>{ga, gb};
  });
}

Tensor equal(const Tensor& a, const Tensor& b) { return comparison(BinaryOp::equal, a, b); }
Tensor not_equal(const Tensor& a, const Tensor& b) {
  return comparison(BinaryOp::not_equal, a, b);
}
Tensor less(const Tensor& a, const Tensor& b) { return comparison(BinaryOp::less, a, b); }
Tensor less_equal(const Tensor& a, const Tensor& b) {
  return comparison(BinaryOp::less_equal, a, b);
}
Tensor greater(const Tensor& a, const Tensor& b) { return comparison(BinaryOp::greater, a, b); }
Tensor greater_equal(const Tensor& a, const Tensor& b) {
  return comparison(BinaryOp::greater_equal, a, b);
}
Tensor logical_and(const Tensor& a, const Tensor& b) {
  return logical(BinaryOp::logical_and, a, b);
}
Tensor logical_or(const Tensor& a, const Tensor& b) { return logical(BinaryOp::logical_or, a, b); }

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  if (detail::goes_through_handler({&condition, &a, &b})) {
    return detail::through_handler({"where", OpFamily::elementwise, {condition, a, b}, [](const std::vector<Tensor>& local) { return where(local[0], local[1], local[2]); }});
  }
  check_defined(condition, "where", "condition");
  if (condition.dtype() != bool_) {
    throw DTypeError(str("where: condition must be a bool tensor, got ",
                         dtype_name(condition.dtype())));
  }
  Shape values_shape = binary_shape(a, b, "where");
  detail::check_same_device(condition, a, "where");
  Shape shape = broadcast_shapes(condition.shape(), values_shape, "where");
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  backend_for(a.device()).where(condition, a, b, out);
  return record_gradient(out, "where", {a, b},
                         [condition, sa = a.shape(), sb = b.shape()](const Tensor& g) {
                           Tensor zero = scalar_like(g, 0.0);
                           return std::vector<Tensor>{
                               reduce_to_shape(where(condition, g, zero), sa),
                               reduce_to_shape(where(condition, zero, g), sb)};
                         });
}

}  // namespace keras::ops

namespace keras {
Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return ops::subtract(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return ops::multiply(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return ops::divide(a, b); }
Tensor operator-(const Tensor& x) { return ops::negative(x); }
Tensor operator+(const Tensor& a, double b) { return ops::add(a, ops::scalar_like(a, b)); }
Tensor operator-(const Tensor& a, double b) { return ops::subtract(a, ops::scalar_like(a, b)); }
Tensor operator*(const Tensor& a, double b) { return ops::multiply(a, ops::scalar_like(a, b)); }
Tensor operator/(const Tensor& a, double b) { return ops::divide(a, ops::scalar_like(a, b)); }
Tensor operator+(double a, const Tensor& b) { return ops::add(ops::scalar_like(b, a), b); }
Tensor operator-(double a, const Tensor& b) { return ops::subtract(ops::scalar_like(b, a), b); }
Tensor operator*(double a, const Tensor& b) { return ops::multiply(ops::scalar_like(b, a), b); }
Tensor operator/(double a, const Tensor& b) { return ops::divide(ops::scalar_like(b, a), b); }
}  // namespace keras
