// Names and sizes of dtypes.
#include "engine/dtype.h"

namespace keras {

std::size_t dtype_size(DType dtype) {
  return dispatch_dtype(dtype, [](auto value) { return sizeof(value); });
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::bool_: return "bool";
    case DType::uint8: return "uint8";
    case DType::int32: return "int32";
    case DType::int64: return "int64";
    case DType::float32: return "float32";
    case DType::float64: return "float64";
    case DType::bfloat16: return "bfloat16";
    case DType::float16: return "float16";
  }
  return "unknown";
}

DType dtype_from_name(std::string_view name) {
  for (DType dtype : {DType::bool_, DType::uint8, DType::int32, DType::int64, DType::float32,
                      DType::float64, DType::bfloat16, DType::float16}) {
    if (dtype_name(dtype) == name) return dtype;
  }
  throw ValueError(str("unknown dtype '", name,
                       "'; expected one of bool, uint8, int32, int64, float32, float64, bfloat16, float16"));
}

bool is_floating(DType dtype) {
  return dtype == DType::float32 || dtype == DType::float64 || is_half_precision(dtype);
}

bool is_half_precision(DType dtype) { return dtype == DType::bfloat16 || dtype == DType::float16; }

bool is_integer(DType dtype) {
  return dtype == DType::uint8 || dtype == DType::int32 || dtype == DType::int64;
}

}  // namespace keras
