// ReLU on 16-bit patterns (see half_relu.h). The float32 rules it reproduces are
// scalar::relu (x > 0 or NaN keeps x, else +0) and the fused gradient g * relu'(x) with
// relu'(x) = NaN for a NaN x, 1 above 0, else 0: so g where x > 0, a zero of g's sign below or
// at 0, and NaN where g or x is NaN or where 0 meets an infinite g.
#include "engine/cpu/half_relu.h"

#include <cstdint>
#include <initializer_list>

#include "engine/cpu/kernels.h"
#include "engine/cpu/strided_loops.h"
#include "engine/errors.h"
#include "engine/half_precision.h"
#include "engine/thread_pool.h"

namespace keras::cpu {
namespace {

// The dtype's infinity and its quiet NaN (the pattern narrowing gives a NaN, sign aside).
template <typename Half>
struct HalfLayout;
template <>
struct HalfLayout<BFloat16> {
  static constexpr std::uint16_t infinity = 0x7f80, quiet_nan = 0x7fc0;
};
template <>
struct HalfLayout<Float16> {
  static constexpr std::uint16_t infinity = 0x7c00, quiet_nan = 0x7e00;
};

constexpr std::uint16_t kSign = 0x8000, kMagnitude = 0x7fff;

// Plain functions of 16-bit words with selects only, so GCC vectorises the loops below.
template <typename Half>
std::uint16_t relu_bits(std::uint16_t x) {
  const bool nan = (x & kMagnitude) > HalfLayout<Half>::infinity;
  const bool positive = static_cast<std::int16_t>(x) > 0;
  const std::uint16_t kept = positive ? x : std::uint16_t{0};
  return nan ? static_cast<std::uint16_t>((x & kSign) | HalfLayout<Half>::quiet_nan) : kept;
}

template <typename Half>
std::uint16_t relu_gradient_bits(std::uint16_t x, std::uint16_t g) {
  constexpr std::uint16_t infinity = HalfLayout<Half>::infinity;
  const bool x_nan = (x & kMagnitude) > infinity;
  const bool g_nan = (g & kMagnitude) > infinity;
  const bool g_infinite = (g & kMagnitude) == infinity;
  const bool positive = static_cast<std::int16_t>(x) > 0;
  const std::uint16_t signed_zero = static_cast<std::uint16_t>(g & kSign);
  const std::uint16_t finite_result = positive ? g : signed_zero;
  const bool nan = x_nan || g_nan || (!positive && g_infinite);
  return nan ? static_cast<std::uint16_t>((g & kSign) | HalfLayout<Half>::quiet_nan) : finite_result;
}

template <typename Half>
void relu_range(const Half* x, Half* out, std::int64_t begin, std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) out[i].bits = relu_bits<Half>(x[i].bits);
}

template <typename Half>
void relu_gradient_range(const Half* x, const Half* gradient, Half* result, std::int64_t begin, std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) result[i].bits = relu_gradient_bits<Half>(x[i].bits, gradient[i].bits);
}

void check_same_half_dtype(const char* what, std::initializer_list<const Tensor*> tensors) {
  const DType dtype = (*tensors.begin())->dtype();
  for (const Tensor* tensor : tensors) {
    if (tensor->dtype() != dtype || !is_half_precision(dtype)) {
      throw DTypeError(str(what, " on 16 bits takes tensors of one bfloat16 or float16 dtype, got ",
                           dtype_name(tensor->dtype()), " beside ", dtype_name(dtype)));
    }
  }
}

}  // namespace

void relu_of_half(const Tensor& x, Tensor& out) {
  check_same_half_dtype("relu", {&x, &out});
  dispatch_half_precision(x.dtype(), [&](auto half) {
    using Half = decltype(half);
    const Half* in = elements_of<Half>(x);
    Half* result = elements_of<Half>(out);
    parallel_for(x.size(), kParallelGrain,
                 [&](std::int64_t begin, std::int64_t end) { relu_range(in, result, begin, end); });
  });
}

void relu_gradient_of_half(const Tensor& x, const Tensor& output_gradient, Tensor& input_gradient) {
  check_same_half_dtype("relu gradient", {&x, &output_gradient, &input_gradient});
  dispatch_half_precision(x.dtype(), [&](auto half) {
    using Half = decltype(half);
    const Half* in = elements_of<Half>(x);
    const Half* gradient = elements_of<Half>(output_gradient);
    Half* result = elements_of<Half>(input_gradient);
    parallel_for(x.size(), kParallelGrain, [&](std::int64_t begin, std::int64_t end) {
      relu_gradient_range(in, gradient, result, begin, end);
    });
  });
}

}  // namespace keras::cpu
