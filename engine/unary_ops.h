// The element-wise ops of one input, listed once. Each row generates the UnaryOp enum, the op's
// name, its case in the CPU and CUDA kernels and, for the second list, its fused gradient.
// An op's public function and its graph-level gradient rule (when it has no fused one) are in
// engine/ops/elementwise.cpp; adding an op is docs/CONTRIBUTING.md's recipe.
//
// KERAS_UNARY_OPS(X): X(name, floating_only, value) where `value` is the result for one element
// `v` of type T (engine/scalar_rules.h for anything longer than an expression), and
// floating_only says the op is refused on integer tensors (a DTypeError naming the op).
// KERAS_FUSED_UNARY_GRADIENTS(X): X(name, derivative), d value / d v for the ops whose gradient
// the kernels compute in one pass (input_gradient = output_gradient * derivative); these are
// the activations, whose backward pass is a large share of a training step.
//
// logical_not (bool to bool) is the one unary op outside the lists: it has no T.
#pragma once

#define KERAS_UNARY_OPS(X)                                   \
  X(negative, false, scalar::negative(v))                   \
  X(abs, false, scalar::absolute(v))                        \
  X(sign, false, scalar::sign(v))                           \
  X(square, false, scalar::multiply(v, v))                  \
  X(relu, false, scalar::relu(v))                           \
  X(exp, true, std::exp(v))                                 \
  X(log, true, std::log(v))                                 \
  X(sqrt, true, std::sqrt(v))                               \
  X(rsqrt, true, T{1} / std::sqrt(v))                       \
  X(reciprocal, true, T{1} / v)                             \
  X(tanh, true, std::tanh(v))                               \
  X(sigmoid, true, scalar::sigmoid(v))                      \
  X(gelu, true, scalar::gelu(v))                            \
  X(gelu_approximate, true, scalar::gelu_approximate(v))    \
  X(silu, true, v * scalar::sigmoid(v))

#define KERAS_FUSED_UNARY_GRADIENTS(X)         \
  X(relu, scalar::relu_derivative(v))          \
  X(tanh, scalar::tanh_derivative(v))          \
  X(sigmoid, scalar::sigmoid_derivative(v))    \
  X(gelu, scalar::gelu_derivative(v))          \
  X(gelu_approximate, scalar::gelu_approximate_derivative(v)) \
  X(silu, scalar::sigmoid(v) * (T{1} + v * (T{1} - scalar::sigmoid(v))))

namespace keras {

enum class UnaryOp {
#define KERAS_UNARY_ENUMERATOR(name, floating_only, value) name,
  KERAS_UNARY_OPS(KERAS_UNARY_ENUMERATOR)
#undef KERAS_UNARY_ENUMERATOR
  logical_not
};

constexpr const char* unary_op_name(UnaryOp op) {
  switch (op) {
#define KERAS_UNARY_NAME(name, floating_only, value) \
  case UnaryOp::name: return #name;
    KERAS_UNARY_OPS(KERAS_UNARY_NAME)
#undef KERAS_UNARY_NAME
    case UnaryOp::logical_not: return "logical_not";
  }
  return "unknown unary op";
}

constexpr bool unary_op_is_floating_only(UnaryOp op) {
  switch (op) {
#define KERAS_UNARY_FLOATING_ONLY(name, floating_only, value) \
  case UnaryOp::name: return floating_only;
    KERAS_UNARY_OPS(KERAS_UNARY_FLOATING_ONLY)
#undef KERAS_UNARY_FLOATING_ONLY
    case UnaryOp::logical_not: return false;
  }
  return false;
}

constexpr bool unary_op_has_fused_gradient(UnaryOp op) {
  switch (op) {
#define KERAS_UNARY_FUSED(name, derivative) \
  case UnaryOp::name: return true;
    KERAS_FUSED_UNARY_GRADIENTS(KERAS_UNARY_FUSED)
#undef KERAS_UNARY_FUSED
    default: return false;
  }
}

}  // namespace keras
