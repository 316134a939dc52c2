// GPU element-wise kernels: fill, cast, unary ops and their fused gradients, binary ops with
// broadcasting, where. One thread per output element; the op is a run-time switch inside the
// body (uniform across a warp, so it costs no divergence, and it keeps one instantiation per
// dtype instead of one per op and dtype). The scalar rules are engine/scalar_rules.h, shared
// with the CPU.
#pragma once
#include <cmath>
#include <type_traits>

#include "engine/cuda/kernels.h"
#include "engine/scalar_rules.h"

namespace keras::gpu_kernels {

template <typename T>
struct FillBody {
  T* out;
  T value;
  KERAS_HOST_DEVICE void operator()(std::int64_t i) const { out[i] = value; }
};

template <typename In, typename Out>
struct CastBody {
  const In* x;
  Out* out;
  KERAS_HOST_DEVICE void operator()(std::int64_t i) const { out[i] = scalar::convert<Out>(x[i]); }
};

template <typename T>
KERAS_HOST_DEVICE T unary_value(UnaryOp op, T v) {
  switch (op) {
#define KERAS_UNARY_CASE(name, floating_only, value)                  \
  case UnaryOp::name:                                                 \
    if constexpr (!(floating_only) || std::is_floating_point_v<T>) {  \
      return value;                                                   \
    }                                                                 \
    break;
    KERAS_UNARY_OPS(KERAS_UNARY_CASE)
#undef KERAS_UNARY_CASE
    case UnaryOp::logical_not: break;
  }
  return v;  // unreachable: ops check the dtype before calling the kernel
}

template <typename T>
struct UnaryBody {
  UnaryOp op;
  const T* x;
  T* out;
  KERAS_HOST_DEVICE void operator()(std::int64_t i) const { out[i] = unary_value(op, x[i]); }
};

struct LogicalNotBody {
  const bool* x;
  bool* out;
  KERAS_HOST_DEVICE void operator()(std::int64_t i) const { out[i] = !x[i]; }
};

template <typename T>
struct UnaryGradientBody {
  UnaryOp op;
  const T* x;
  const T* output_gradient;
  T* input_gradient;
  KERAS_HOST_DEVICE void operator()(std::int64_t i) const {
    T v = x[i];
    T derivative = v;
    switch (op) {
#define KERAS_UNARY_GRADIENT_CASE(name, rule) \
  case UnaryOp::name: derivative = rule; break;
      KERAS_FUSED_UNARY_GRADIENTS(KERAS_UNARY_GRADIENT_CASE)
#undef KERAS_UNARY_GRADIENT_CASE
      default: break;
    }
    input_gradient[i] = output_gradient[i] * derivative;
  }
};

template <typename T>
KERAS_HOST_DEVICE bool compare(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::equal: return x == y;
    case BinaryOp::not_equal: return x != y;
    case BinaryOp::less: return x < y;
    case BinaryOp::less_equal: return x <= y;
    case BinaryOp::greater: return x > y;
    case BinaryOp::greater_equal: return x >= y;
    case BinaryOp::logical_and: return static_cast<bool>(x) && static_cast<bool>(y);
    case BinaryOp::logical_or: return static_cast<bool>(x) || static_cast<bool>(y);
    default: return false;
  }
}

template <typename T>
KERAS_HOST_DEVICE T arithmetic(BinaryOp op, T x, T y, ErrorReport* report) {
  switch (op) {
    case BinaryOp::add: return scalar::add(x, y);
    case BinaryOp::subtract: return scalar::subtract(x, y);
    case BinaryOp::multiply: return scalar::multiply(x, y);
    case BinaryOp::maximum: return scalar::maximum(x, y);
    case BinaryOp::minimum: return scalar::minimum(x, y);
    case BinaryOp::divide:
      if constexpr (std::is_integral_v<T>) {
        if (y == 0) {
          report_error(report, KernelError::integer_division_by_zero, static_cast<long long>(x), 0);
          return T{};
        }
        return scalar::divide_integer(x, y);
      } else {
        return x / y;
      }
    case BinaryOp::power:
      if constexpr (std::is_integral_v<T>) {
        if constexpr (std::is_signed_v<T>) {
          if (y < T{}) {
            report_error(report, KernelError::negative_integer_power, static_cast<long long>(x),
                         static_cast<long long>(y));
            return T{};
          }
        }
        return scalar::power_integer(x, y);
      } else {
        return std::pow(x, y);
      }
    default: return T{};
  }
}

// Comparisons and logical ops write bool; arithmetic writes T.
template <typename T, typename Out>
struct BinaryBody {
  BinaryOp op;
  IndexMap<3> map;  // a, b, out
  const T* a;
  const T* b;
  Out* out;
  ErrorReport* report;
  KERAS_HOST_DEVICE void operator()(std::int64_t i) const {
    std::int64_t at[3];
    map.offsets(i, at);
    if constexpr (std::is_same_v<Out, bool>) {
      out[at[2]] = compare(op, a[at[0]], b[at[1]]);
    } else {
      out[at[2]] = arithmetic(op, a[at[0]], b[at[1]], report);
    }
  }
};

template <typename T>
struct WhereBody {
  IndexMap<4> map;  // condition, a, b, out
  const bool* condition;
  const T* a;
  const T* b;
  T* out;
  KERAS_HOST_DEVICE void operator()(std::int64_t i) const {
    std::int64_t at[4];
    map.offsets(i, at);
    out[at[3]] = condition[at[0]] ? a[at[1]] : b[at[2]];
  }
};


template <class Launcher>
void fill(Launcher& launcher, Tensor& out, double value) {
  dispatch_dtype(out.dtype(), [&](auto zero) {
    using T = decltype(zero);
    launcher.for_each(out.size(), FillBody<T>{elements_of<T>(out), scalar::convert<T>(value)});
  });
}

template <class Launcher>
void cast(Launcher& launcher, const Tensor& x, Tensor& out) {
  if (x.dtype() == out.dtype()) {
    if (x.raw_data() != out.raw_data()) launcher.copy(out.raw_data(), x.raw_data(), x.nbytes());
    return;
  }
  dispatch_dtype(x.dtype(), [&](auto in_zero) {
    using In = decltype(in_zero);
    dispatch_dtype(out.dtype(), [&](auto out_zero) {
      using Out = decltype(out_zero);
      launcher.for_each(x.size(), CastBody<In, Out>{elements_of<In>(x), elements_of<Out>(out)});
    });
  });
}

template <class Launcher>
void unary(Launcher& launcher, UnaryOp op, const Tensor& x, Tensor& out) {
  if (op == UnaryOp::logical_not) {
    launcher.for_each(x.size(), LogicalNotBody{elements_of<bool>(x), elements_of<bool>(out)});
    return;
  }
  dispatch_numeric(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    launcher.for_each(x.size(), UnaryBody<T>{op, elements_of<T>(x), elements_of<T>(out)});
  });
}

template <class Launcher>
void unary_gradient(Launcher& launcher, UnaryOp op, const Tensor& x, const Tensor& output_gradient,
                    Tensor& input_gradient) {
  if (!unary_op_has_fused_gradient(op)) {
    throw Error(str("internal error: no fused gradient for ", unary_op_name(op)));
  }
  dispatch_floating(x.dtype(), unary_op_name(op), [&](auto zero) {
    using T = decltype(zero);
    launcher.for_each(x.size(), UnaryGradientBody<T>{op, elements_of<T>(x), elements_of<T>(output_gradient),
                                                     elements_of<T>(input_gradient)});
  });
}

template <class Launcher>
void binary(Launcher& launcher, BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  IndexMap<3> map = index_map(
      make_plan<3>(out.shape(), {broadcast_strides(a.shape(), out.shape()),
                                 broadcast_strides(b.shape(), out.shape()),
                                 row_major_strides(out.shape())}),
      binary_op_name(op));
  bool to_bool = out.dtype() == DType::bool_;
  dispatch_compute_dtype(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if (to_bool) {
      launcher.for_each(out.size(), BinaryBody<T, bool>{op, map, elements_of<T>(a), elements_of<T>(b),
                                                        elements_of<bool>(out), nullptr});
      return;
    }
    if constexpr (!std::is_same_v<T, bool>) {
      bool may_fail = std::is_integral_v<T> && (op == BinaryOp::divide || op == BinaryOp::power);
      launcher.for_each(out.size(), BinaryBody<T, T>{op, map, elements_of<T>(a), elements_of<T>(b),
                                                     elements_of<T>(out), launcher.error_report()});
      // Only integer division and power can fail; checking waits for the GPU, so the others
      // do not pay for it.
      if (may_fail) launcher.check_errors();
    }
  });
}

template <class Launcher>
void where(Launcher& launcher, const Tensor& condition, const Tensor& a, const Tensor& b,
           Tensor& out) {
  IndexMap<4> map = index_map(
      make_plan<4>(out.shape(), {broadcast_strides(condition.shape(), out.shape()),
                                 broadcast_strides(a.shape(), out.shape()),
                                 broadcast_strides(b.shape(), out.shape()),
                                 row_major_strides(out.shape())}),
      "where");
  dispatch_dtype(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    launcher.for_each(out.size(), WhereBody<T>{map, elements_of<bool>(condition), elements_of<T>(a),
                                               elements_of<T>(b), elements_of<T>(out)});
  });
}

}  // namespace keras::gpu_kernels
