// float32 exp and erf written without calls or branches, so that GCC vectorises the loops that
// use them (GELU and its gradient, engine/cpu/elementwise.cpp; softmax, engine/line_rules.h);
// glibc's expf and erff are calls, one element at a time. Measured on the transformer training
// step at 1 thread (benchmarks/transformer_step, interleaved with the build before): 569 ->
// 505 ms in float32 and 636 -> 540 ms under mixed_bfloat16 (perf had put GELU's erf and exp at
// 8% of the float32 step, and softmax's expf with its slow path for the mask's -inf at 3.7% of
// the mixed step once GELU was vectorised).
//
// exp is Cephes' expf (range reduction by ln 2 in two parts, a degree-6 polynomial, the power
// of two put into the exponent bits): within 1.5 ulp of the true value on [-87.3, 88.4], +inf
// above, 0 below exp's smallest normal result (glibc gives subnormals down to 1e-45 there).
// erf is the rational approximation XLA and Eigen use for float32 (so JAX computes the same
// function): within 4.5e-7 of the true value (7 ulp of 1) with inputs clamped to [-4, 4],
// beyond which erf is +-1 in float32. NaN in, NaN out for both. tests/float_math_test.cpp
// measures both against double precision.
//
// The selects are written as ternaries on plain values; GCC if-converts them into blends only
// without -ftrapping-math (CMakeLists.txt turns it off: we never read the floating-point
// exception flags).
#pragma once
#include <cstdint>
#include <cstring>

namespace keras::float_math {

inline float from_bits(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}
inline std::uint32_t to_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

inline float exp(float x) {
  constexpr float kHighest = 88.3762626647949f;  // log(FLT_MAX)
  constexpr float kLowest = -87.3365478515625f;  // log(FLT_MIN): 2^n stays a normal number
  // Adding 1.5 * 2^23 rounds to an integer (to nearest) and leaves it in the low mantissa bits:
  // the exponent n without a float-to-int conversion.
  constexpr float kRounder = 12582912.0f;
  float clamped = x > kHighest ? kHighest : x;
  clamped = clamped < kLowest ? kLowest : clamped;
  float shifted = clamped * 1.44269504088896341f + kRounder;
  float n = shifted - kRounder;
  // r = x - n ln 2, with ln 2 in two parts so that r keeps its low bits.
  float r = clamped - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float mantissa = p * r * r + r + 1.0f;
  float power_of_two = from_bits((to_bits(shifted) - to_bits(kRounder) + 127u) << 23);
  float result = mantissa * power_of_two;
  result = x < kLowest ? 0.0f : result;
  return x > kHighest ? __builtin_inff() : result;
}

inline float erf(float x) {
  float clamped = x > 4.0f ? 4.0f : x;
  clamped = clamped < -4.0f ? -4.0f : clamped;
  float square = clamped * clamped;
  float numerator = -2.72614225801306e-10f;  // odd polynomial, over x
  numerator = numerator * square + 2.77068142495902e-08f;
  numerator = numerator * square + -2.10102402082508e-06f;
  numerator = numerator * square + -5.69250639462346e-05f;
  numerator = numerator * square + -7.34990630326855e-04f;
  numerator = numerator * square + -2.95459980854025e-03f;
  numerator = numerator * square + -1.60960333262415e-02f;
  float denominator = -1.45660718464996e-05f;  // even polynomial
  denominator = denominator * square + -2.13374055278905e-04f;
  denominator = denominator * square + -1.68282697438203e-03f;
  denominator = denominator * square + -7.37332916720468e-03f;
  denominator = denominator * square + -1.42647390514189e-02f;
  return clamped * numerator / denominator;
}

}  // namespace keras::float_math
