// Element types of tensors. Kernels are written once as templates and instantiated per dtype
// through the dispatchers below. bfloat16 and float16 are storage types (engine/half_precision.h):
// the kernels that only move or convert elements take them natively (dispatch_dtype); every
// other kernel computes on them in float32 (engine/float32_compute.h), so the dispatchers that
// compute (dispatch_compute_dtype, dispatch_numeric, dispatch_floating) leave them out.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/errors.h"
#include "engine/half_precision.h"

namespace keras {

// New dtypes go at the end: the numbers are stable (checkpoints and signatures carry them).
enum class DType : std::uint8_t { bool_, uint8, int32, int64, float32, float64, bfloat16, float16 };

inline constexpr DType float32 = DType::float32;
inline constexpr DType float64 = DType::float64;
inline constexpr DType int32 = DType::int32;
inline constexpr DType int64 = DType::int64;
inline constexpr DType uint8 = DType::uint8;
inline constexpr DType bool_ = DType::bool_;
inline constexpr DType bfloat16 = DType::bfloat16;
inline constexpr DType float16 = DType::float16;

std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
// Parses "float32", "int64", … (Keras' names); throws ValueError on anything else.
DType dtype_from_name(std::string_view name);
bool is_floating(DType dtype);  // float32, float64, bfloat16, float16
// bfloat16 and float16: stored in 16 bits, computed in float32.
bool is_half_precision(DType dtype);
bool is_integer(DType dtype);  // uint8, int32, int64 (not bool)

template <typename T>
struct dtype_of;
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::bool_;
};
template <>
struct dtype_of<std::uint8_t> {
  static constexpr DType value = DType::uint8;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::int32;
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr DType value = DType::int64;
};
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::float64;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = DType::bfloat16;
};
template <>
struct dtype_of<Float16> {
  static constexpr DType value = DType::float16;
};

// Calls fn(T{}) with the C++ type of `dtype`: for kernels that move or convert elements.
template <typename Fn>
decltype(auto) dispatch_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::bool_: return fn(bool{});
    case DType::uint8: return fn(std::uint8_t{});
    case DType::int32: return fn(std::int32_t{});
    case DType::int64: return fn(std::int64_t{});
    case DType::float32: return fn(float{});
    case DType::float64: return fn(double{});
    case DType::bfloat16: return fn(BFloat16{});
    case DType::float16: return fn(Float16{});
  }
  throw DTypeError("unknown dtype");
}

// Same, for kernels that compute: every dtype but the half-precision ones, which reach kernels
// as float32 (engine/float32_compute.h).
template <typename Fn>
decltype(auto) dispatch_compute_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::bool_: return fn(bool{});
    case DType::uint8: return fn(std::uint8_t{});
    case DType::int32: return fn(std::int32_t{});
    case DType::int64: return fn(std::int64_t{});
    case DType::float32: return fn(float{});
    case DType::float64: return fn(double{});
    case DType::bfloat16:
    case DType::float16: break;
  }
  throw DTypeError(str("internal error: a computing kernel received a ", dtype_name(dtype),
                       " tensor; half-precision tensors are computed in float32 by the backend"));
}

// Calls fn(BFloat16{}) or fn(Float16{}) for the half-precision dtypes and returns true; false
// (fn not called) for the others. For the kernels and transports with 16-bit paths of their own.
template <typename Fn>
bool dispatch_half_precision(DType dtype, Fn&& fn) {
  if (dtype == DType::bfloat16) {
    fn(BFloat16{});
    return true;
  }
  if (dtype == DType::float16) {
    fn(Float16{});
    return true;
  }
  return false;
}

// Same, for the dtypes arithmetic is defined on (everything but bool).
template <typename Fn>
decltype(auto) dispatch_numeric(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::uint8: return fn(std::uint8_t{});
    case DType::int32: return fn(std::int32_t{});
    case DType::int64: return fn(std::int64_t{});
    case DType::float32: return fn(float{});
    case DType::float64: return fn(double{});
    case DType::bool_: throw DTypeError("arithmetic is not defined on bool tensors; cast them to a number dtype first");
    case DType::bfloat16:
    case DType::float16: break;
  }
  throw DTypeError(str("internal error: a computing kernel received a ", dtype_name(dtype),
                       " tensor; half-precision tensors are computed in float32 by the backend"));
}

// Same, for floating dtypes only; `what` names the operation in the error.
template <typename Fn>
decltype(auto) dispatch_floating(DType dtype, std::string_view what, Fn&& fn) {
  switch (dtype) {
    case DType::float32: return fn(float{});
    case DType::float64: return fn(double{});
    case DType::bfloat16:
    case DType::float16:
      throw DTypeError(str("internal error: ", what, " received a ", dtype_name(dtype),
                           " tensor; half-precision tensors are computed in float32 by the "
                           "backend"));
    default: break;
  }
  throw DTypeError(str(what, " expects a float32 or float64 tensor, got ", dtype_name(dtype)));
}

}  // namespace keras
