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
  }
  return "unknown";
}

DType dtype_from_name(std::string_view name) {
  for (DType dtype : {DType::bool_, DType::uint8, DType::int32, DType::int64, DType::float32,
                      DType::float64}) {
    if (dtype_name(dtype) == name) return dtype;
  }
  throw ValueError(str("unknown dtype '", name,
                       "'; expected one of bool, uint8, int32, int64, float32, float64"));
}

bool is_floating(DType dtype) { return dtype == DType::float32 || dtype == DType::float64; }

bool is_integer(DType dtype) {
  return dtype == DType::uint8 || dtype == DType::int32 || dtype == DType::int64;
}

}  // namespace keras
