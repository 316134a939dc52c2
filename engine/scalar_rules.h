// What one element of an op gives at the edges of its type, written once for every backend
// (KERAS_HOST_DEVICE: the CUDA kernels call these too). The rules follow NumPy unless said otherwise:
// - NaN propagates: relu, sign, maximum, minimum, max/min reductions give NaN where an input is
//   NaN (NumPy's maximum, not fmax); argmax/argmin give the index of the first NaN.
// - Integers wrap around (two's complement) on overflow in negative, abs, square, add,
//   subtract, multiply, sums and power, as NumPy's fixed-width integers do; INT_MIN / -1 gives
//   INT_MIN (C++ would trap, SIGFPE). Integer division by zero is an error here (NumPy returns
//   0 with a warning); an integer raised to a negative power is an error, as in NumPy.
// - Float to integer casts follow XLA (JAX): NaN becomes 0 and values beyond the integer range
//   saturate to its minimum or maximum. NumPy leaves these to the C cast, which is undefined
//   behaviour in C++ and gives INT_MIN on x86; that is where we differ from NumPy on purpose.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "engine/float_math.h"
#include "engine/half_precision.h"
#include "engine/host_device.h"

namespace keras::scalar {

template <typename T>
KERAS_HOST_DEVICE constexpr bool is_nan(T value) {
  if constexpr (std::is_floating_point_v<T>) {
    return value != value;
  } else {
    return false;
  }
}

// The unsigned type of the same width, where overflow is defined (modular).
template <typename T>
using Unsigned = std::make_unsigned_t<std::conditional_t<std::is_same_v<T, bool>, unsigned char, T>>;

template <typename T>
KERAS_HOST_DEVICE constexpr T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<Unsigned<T>>(static_cast<Unsigned<T>>(a) + static_cast<Unsigned<T>>(b)));
  } else {
    return a + b;
  }
}

template <typename T>
KERAS_HOST_DEVICE constexpr T subtract(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<Unsigned<T>>(static_cast<Unsigned<T>>(a) - static_cast<Unsigned<T>>(b)));
  } else {
    return a - b;
  }
}

template <typename T>
KERAS_HOST_DEVICE constexpr T multiply(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // Unsigned types narrower than int promote to (signed) int; widen to 64 bits first.
    return static_cast<T>(static_cast<Unsigned<T>>(static_cast<std::uint64_t>(static_cast<Unsigned<T>>(a)) *
                                                   static_cast<std::uint64_t>(static_cast<Unsigned<T>>(b))));
  } else {
    return a * b;
  }
}

template <typename T>
KERAS_HOST_DEVICE constexpr T negative(T value) {
  return subtract(T{}, value);
}

template <typename T>
KERAS_HOST_DEVICE constexpr T absolute(T value) {
  if constexpr (std::is_unsigned_v<T>) {
    return value;
  } else if constexpr (std::is_integral_v<T>) {
    return value < 0 ? negative(value) : value;
  } else {
    return std::fabs(value);
  }
}

template <typename T>
KERAS_HOST_DEVICE constexpr T sign(T value) {
  if (is_nan(value)) return value;
  if constexpr (std::is_unsigned_v<T>) {
    return static_cast<T>(value != T{});
  } else {
    return static_cast<T>((T{} < value) - (value < T{}));
  }
}

// NaN passes through; -0 gives +0, as max(x, 0) in IEEE 754-2019 and XLA.
template <typename T>
KERAS_HOST_DEVICE constexpr T relu(T value) {
  return value > T{} || is_nan(value) ? value : T{};
}

// -0 counts as below +0 (IEEE 754-2019 maximum/minimum, XLA), so results do not depend on the
// order of the arguments (or of a reduction).
template <typename T>
KERAS_HOST_DEVICE constexpr T maximum(T a, T b) {
  if (is_nan(a)) return a;
  if (is_nan(b)) return b;
  if constexpr (std::is_floating_point_v<T>) {
    if (a == b) return std::signbit(a) ? b : a;
  }
  return a >= b ? a : b;
}

template <typename T>
KERAS_HOST_DEVICE constexpr T minimum(T a, T b) {
  if (is_nan(a)) return a;
  if (is_nan(b)) return b;
  if constexpr (std::is_floating_point_v<T>) {
    if (a == b) return std::signbit(a) ? a : b;
  }
  return a <= b ? a : b;
}

// Integer division truncating toward zero, as C++ and the previous behaviour; the caller has
// checked that b != 0.
template <typename T>
KERAS_HOST_DEVICE constexpr T divide_integer(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return negative(a);  // INT_MIN / -1 overflows in C++ (SIGFPE on x86)
  }
  return static_cast<T>(a / b);
}

// a ** b for integers, b >= 0 (checked by the caller), by repeated squaring, wrapping.
template <typename T>
KERAS_HOST_DEVICE constexpr T power_integer(T base, T exponent) {
  T result = 1;
  auto remaining = static_cast<Unsigned<T>>(exponent);
  while (remaining > 0) {
    if (remaining & 1) result = multiply(result, base);
    base = multiply(base, base);
    remaining = static_cast<Unsigned<T>>(remaining >> 1);
  }
  return result;
}

// Float to integer (or integer to integer) conversion with XLA's rules; see the file comment.
template <typename Out, typename In>
KERAS_HOST_DEVICE constexpr Out convert(In value) {
  if constexpr (std::is_same_v<In, Out>) {
    return value;
  } else if constexpr (is_half_precision_type<In>) {
    // Through float32, which holds every bfloat16 and float16 value exactly.
    return convert<Out>(static_cast<float>(value));
  } else if constexpr (is_half_precision_type<Out>) {
    // Through float32: float64 to float32 to 16 bits can round twice, as in XLA's convert.
    return Out(convert<float>(value));
  } else if constexpr (std::is_same_v<Out, bool>) {
    return value != In{};  // NaN != 0: NaN is true, as in NumPy
  } else if constexpr (std::is_integral_v<Out> && std::is_floating_point_v<In>) {
    if (is_nan(value)) return Out{};
    // The bounds as In: the maximum of a 64-bit integer rounds up to 2^63 in double, so
    // compare with >= against that rounded bound.
    constexpr In lowest = static_cast<In>(std::numeric_limits<Out>::lowest());
    constexpr In highest = static_cast<In>(std::numeric_limits<Out>::max());
    if (value <= lowest) return std::numeric_limits<Out>::lowest();
    if (value >= highest) return std::numeric_limits<Out>::max();
    return static_cast<Out>(value);
  } else {
    return static_cast<Out>(value);
  }
}

// Floating-point activations and their derivatives, for the unary kernels and their fused
// gradients (x is the op's input).
template <typename T>
KERAS_HOST_DEVICE T sigmoid(T x) {
  return x >= 0 ? static_cast<T>(1) / (static_cast<T>(1) + std::exp(-x))
                : std::exp(x) / (static_cast<T>(1) + std::exp(x));
}

// sqrt(1/2), 1/sqrt(2*pi) and sqrt(2/pi), to double precision.
inline constexpr double kSqrtHalf = 0.70710678118654752440084436210485;
inline constexpr double kInverseSqrtTwoPi = 0.39894228040143267793994605993438;
inline constexpr double kSqrtTwoOverPi = 0.79788456080286535587989211986876;
inline constexpr double kGeluCubic = 0.044715;  // the tanh form's cubic coefficient

// erf and exp in the loops of GELU and softmax: on the CPU, float32 takes engine/float_math.h's
// branch-free forms, which those loops vectorise (glibc's are calls, one element at a time);
// the GPU and float64 take the library's.
template <typename T>
KERAS_HOST_DEVICE T vectorizable_erf(T x) {
#ifndef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, float>) return float_math::erf(x);
#endif
  return std::erf(x);
}
template <typename T>
KERAS_HOST_DEVICE T vectorizable_exp(T x) {
#ifndef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, float>) return float_math::exp(x);
#endif
  return std::exp(x);
}

template <typename T>
KERAS_HOST_DEVICE T gelu(T x) {
  return static_cast<T>(0.5) * x * (static_cast<T>(1) + vectorizable_erf(x * static_cast<T>(kSqrtHalf)));
}

// The tanh form, keras.ops.gelu(approximate=True): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T>
KERAS_HOST_DEVICE T gelu_approximate(T x) {
  T inner = static_cast<T>(kSqrtTwoOverPi) * (x + static_cast<T>(kGeluCubic) * x * x * x);
  return T{0.5} * x * (T{1} + std::tanh(inner));
}

template <typename T>
KERAS_HOST_DEVICE T gelu_approximate_derivative(T x) {
  T inner = static_cast<T>(kSqrtTwoOverPi) * (x + static_cast<T>(kGeluCubic) * x * x * x);
  T t = std::tanh(inner);
  T inner_derivative = static_cast<T>(kSqrtTwoOverPi) * (T{1} + T{3} * static_cast<T>(kGeluCubic) * x * x);
  return T{0.5} * (T{1} + t) + T{0.5} * x * (T{1} - t * t) * inner_derivative;
}

// NaN in, NaN out: a NaN must not vanish from the gradient either. Written as two selects,
// not nested branches, so that GCC vectorises it.
template <typename T>
KERAS_HOST_DEVICE T relu_derivative(T x) {
  T step = x > T{} ? T{1} : T{};
  return x != x ? x : step;
}

template <typename T>
KERAS_HOST_DEVICE T tanh_derivative(T x) {
  T t = std::tanh(x);
  return T{1} - t * t;
}

template <typename T>
KERAS_HOST_DEVICE T sigmoid_derivative(T x) {
  T s = sigmoid(x);
  return s * (T{1} - s);
}

template <typename T>
KERAS_ALWAYS_INLINE KERAS_HOST_DEVICE T gelu_derivative(T x) {
  T cdf = T{0.5} * (T{1} + vectorizable_erf(x * static_cast<T>(kSqrtHalf)));
  T pdf = vectorizable_exp(T{-0.5} * x * x) * static_cast<T>(kInverseSqrtTwoPi);
  return cdf + x * pdf;
}

}  // namespace keras::scalar
