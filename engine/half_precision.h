// The element types of bfloat16 and float16 tensors: 16 bits of storage each, converted to and
// from float32 with round-to-nearest-even, as XLA, PyTorch and ml_dtypes convert. They carry no
// arithmetic on purpose: the backends compute on them in float32 (engine/float32_compute.h), the
// way XLA's CPU and GPU backends lower 16-bit ops they have no native kernel for, so one
// rounding happens per op and never per partial sum. KERAS_HOST_DEVICE: the CUDA casts use the
// same conversions as the CPU's.
#pragma once
#include <cstdint>
#include <cstring>

#include "engine/host_device.h"

namespace keras {

namespace half_bits {

KERAS_HOST_DEVICE inline std::uint32_t of_float(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

KERAS_HOST_DEVICE inline float to_float(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// bfloat16 is float32's upper half: rounding adds half an ulp of the kept part (plus one when
// the kept part is odd, so ties go to even) and drops the low 16 bits. A NaN stays a quiet NaN
// of its sign (rounding could otherwise carry its payload into infinity).
KERAS_HOST_DEVICE inline std::uint16_t bfloat16_of(float value) {
  std::uint32_t bits = of_float(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>(((bits >> 16) & 0x8000u) | 0x7fc0u);
  }
  std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

KERAS_HOST_DEVICE inline float float_of_bfloat16(std::uint16_t bits) {
  return to_float(static_cast<std::uint32_t>(bits) << 16);
}

// IEEE binary16: 5 exponent bits (bias 15), 10 mantissa bits, largest finite 65504.
KERAS_HOST_DEVICE inline std::uint16_t float16_of(float value) {
  std::uint32_t bits = of_float(value);
  std::uint32_t sign = (bits >> 16) & 0x8000u;
  std::uint32_t magnitude = bits & 0x7fffffffu;
  std::uint32_t result;
  if (magnitude > 0x7f800000u) {
    result = 0x7e00u;  // NaN: a quiet NaN
  } else if (magnitude >= 0x477ff000u) {
    result = 0x7c00u;  // 65520 and above round to infinity (65504 is the largest finite)
  } else if (magnitude < 0x38800000u) {
    // Below 2^-14 the result is subnormal (or zero): its unit is 2^-24. Adding 0.5 (as float,
    // whose unit at 0.5 is 2^-24) lets the FPU do the round-to-nearest-even; the mantissa bits
    // of the sum are then the float16's.
    float shifted = to_float(magnitude) + 0.5f;
    result = of_float(shifted) - 0x3f000000u;
  } else {
    // Normal: rebias the exponent (127 -> 15) and round off 13 mantissa bits, ties to even.
    std::uint32_t odd = (magnitude >> 13) & 1u;
    result = (magnitude - (112u << 23) + 0xfffu + odd) >> 13;
  }
  return static_cast<std::uint16_t>(sign | result);
}

KERAS_HOST_DEVICE inline float float_of_float16(std::uint16_t bits) {
  std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float32.
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return to_float(of_float(magnitude) | sign);
  }
  if (exponent == 31) return to_float(sign | 0x7f800000u | (mantissa << 13));
  return to_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

}  // namespace half_bits

struct BFloat16 {
  std::uint16_t bits = 0;
  BFloat16() = default;
  KERAS_HOST_DEVICE explicit BFloat16(float value) : bits(half_bits::bfloat16_of(value)) {}
  KERAS_HOST_DEVICE explicit operator float() const { return half_bits::float_of_bfloat16(bits); }
};

struct Float16 {
  std::uint16_t bits = 0;
  Float16() = default;
  KERAS_HOST_DEVICE explicit Float16(float value) : bits(half_bits::float16_of(value)) {}
  KERAS_HOST_DEVICE explicit operator float() const { return half_bits::float_of_float16(bits); }
};

template <typename T>
inline constexpr bool is_half_precision_type = false;
template <>
inline constexpr bool is_half_precision_type<BFloat16> = true;
template <>
inline constexpr bool is_half_precision_type<Float16> = true;

}  // namespace keras
