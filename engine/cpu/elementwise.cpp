// CPU element-wise kernels: fill, cast, unary ops and their fused gradients, binary ops with
// broadcasting, where.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/cpu/half_conversion.h"
#include "engine/cpu/half_relu.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/strided_loops.h"
#include "engine/scalar_rules.h"

namespace keras::cpu {

namespace {


// The loops take __restrict pointers in plain functions: captured by a lambda the pointers
// lost that promise and GCC kept them scalar (the relu gradient took 2.7% of an MLP training
// step, measured with perf). Callers check that the buffers differ; an in-place call takes
// the loop without the promise.
template <typename In, typename Out, typename Fn>
void map_range(const In* __restrict x, Out* __restrict out, std::int64_t begin, std::int64_t end,
               Fn fn) {
  for (std::int64_t i = begin; i < end; ++i) out[i] = fn(x[i]);
}
template <typename In, typename Out, typename Fn>
void map_range_in_place(const In* x, Out* out, std::int64_t begin, std::int64_t end, Fn fn) {
  for (std::int64_t i = begin; i < end; ++i) out[i] = fn(x[i]);
}

template <typename T, typename Fn>
void gradient_range(const T* __restrict x, const T* __restrict gradient, T* __restrict result,
                    std::int64_t begin, std::int64_t end, Fn derivative) {
  for (std::int64_t i = begin; i < end; ++i) result[i] = gradient[i] * derivative(x[i]);
}
template <typename T, typename Fn>
void gradient_range_in_place(const T* x, const T* gradient, T* result, std::int64_t begin,
                             std::int64_t end, Fn derivative) {
  for (std::int64_t i = begin; i < end; ++i) result[i] = gradient[i] * derivative(x[i]);
}

// Whether the `count` elements from a and from b share memory.
template <typename A, typename B>
bool overlap(const A* a, const B* b, std::int64_t count) {
  auto a_begin = reinterpret_cast<std::uintptr_t>(a), b_begin = reinterpret_cast<std::uintptr_t>(b);
  auto a_end = a_begin + static_cast<std::uintptr_t>(count) * sizeof(A);
  auto b_end = b_begin + static_cast<std::uintptr_t>(count) * sizeof(B);
  return a_begin < b_end && b_begin < a_end;
}

// Runs out[i] = fn(x[i]) over contiguous data, in parallel for large tensors.
template <typename In, typename Out, typename Fn>
void map_contiguous(const In* x, Out* out, std::int64_t count, Fn fn) {
  bool in_place = overlap(x, out, count);
  parallel_for(count, kParallelGrain, [&](std::int64_t begin, std::int64_t end) {
    if (in_place) {
      map_range_in_place(x, out, begin, end, fn);
    } else {
      map_range(x, out, begin, end, fn);
    }
  });
}

// bfloat16 and float16 element-wise ops, fused with their conversions: each thread's range
// goes through in chunks computed in float32 on the stack and narrowed into the output, so a
// 16-bit op reads and writes 16 bits an element instead of the three float32 passes
// engine/float32_compute.h would add (on the mixed transformer step the conversions took
// 12.5% of the time; see half_conversion.h). The loops read bfloat16 in place, widened in
// registers, and float16 widened a chunk at a time (half_conversion.h's reads_in_registers):
// a widening pass first was 2.8% of the mixed transformer step (perf, 1 thread).
constexpr std::int64_t kHalfChunk = 1024;

// The chunk loop every fused 16-bit kernel shares: compute(in, result, start, n) writes a
// chunk's n float32 results (`start` the chunk's first element), where in[i] is inputs[i]'s
// chunk as the loop reads it (each element through static_cast<float>); the result is narrowed
// into `out`.
template <typename Half, typename Compute, typename... Inputs>
void in_float32_chunks(Half* out, std::int64_t count, Compute compute, const Inputs*... inputs) {
  static_assert((std::is_same_v<Inputs, Half> && ...), "the inputs are of the output's 16-bit type");
  using Readable = std::conditional_t<reads_in_registers<Half>, Half, float>;
  parallel_for(count, kParallelGrain, [&](std::int64_t begin, std::int64_t end) {
    alignas(32) float widened[sizeof...(Inputs)][kHalfChunk];
    alignas(32) float result[kHalfChunk];
    for (std::int64_t start = begin; start < end; start += kHalfChunk) {
      std::int64_t n = std::min(kHalfChunk, end - start);
      std::array<const Readable*, sizeof...(Inputs)> in;
      std::size_t input = 0;
      auto chunk_of = [&](const Half* source) -> const Readable* {
        if constexpr (reads_in_registers<Half>) {
          return source + start;
        } else {
          widen(source + start, widened[input], n);
          return widened[input];
        }
      };
      ((in[input] = chunk_of(inputs), ++input), ...);
      compute(in, result, start, n);
      narrow(result, out + start, n);
    }
  });
}

// The fused kernels' loops: plain functions with __restrict pointers as map_range (written
// inline over the chunks, with a running index into the repeated operand, GCC kept them scalar,
// and a bfloat16 bias add over the attention scores took 5x the float32 add's time: 1.6 against
// 0.32 ms for 16x4x128x128, one thread), each operand read through static_cast<float>.
template <typename In, typename Fn>
void map_to_float(const In* __restrict x, float* __restrict out, std::int64_t n, Fn fn) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = fn(static_cast<float>(x[i]));
}
template <typename In, typename Fn>
void gradient_to_float(const In* __restrict x, const In* __restrict gradient, float* __restrict out, std::int64_t n,
                       Fn derivative) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(gradient[i]) * derivative(static_cast<float>(x[i]));
}
template <typename A, typename B, typename Fn>
void zip_range(const A* __restrict a, const B* __restrict b, float* __restrict out, std::int64_t n, Fn fn) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = fn(static_cast<float>(a[i]), static_cast<float>(b[i]));
}
template <typename A, typename Fn>
void zip_range_with_value(const A* __restrict a, float value, float* __restrict out, std::int64_t n,
                          bool value_first, Fn fn) {
  if (value_first) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = fn(value, static_cast<float>(a[i]));
  } else {
    for (std::int64_t i = 0; i < n; ++i) out[i] = fn(static_cast<float>(a[i]), value);
  }
}

template <typename Half, typename Fn>
void map_half(const Half* x, Half* out, std::int64_t count, Fn fn) {
  in_float32_chunks(
      out, count, [&](auto& in, float* result, std::int64_t, std::int64_t n) { map_to_float(in[0], result, n, fn); },
      x);
}

template <typename Half, typename Fn>
void gradient_half(const Half* x, const Half* gradient, Half* out, std::int64_t count, Fn derivative) {
  in_float32_chunks(
      out, count,
      [&](auto& in, float* result, std::int64_t, std::int64_t n) { gradient_to_float(in[0], in[1], result, n, derivative); },
      x, gradient);
}

template <typename Half, typename Fn>
void zip_half(const Half* a, const Half* b, Half* out, std::int64_t count, Fn fn) {
  in_float32_chunks(
      out, count, [&](auto& in, float* result, std::int64_t, std::int64_t n) { zip_range(in[0], in[1], result, n, fn); },
      a, b);
}

// Broadcasting of the common kind: `small` (`period` elements) repeats along the leading axes
// of `a` (a bias over the last axis, the attention mask over the scores, a scalar); `a` goes
// through in chunks. `small_first`: the repeated operand is the left one of fn. The repeated
// values are widened once and tiled to period + kHalfChunk elements, so every chunk meets them
// as one contiguous run starting at (chunk start) % period.
template <typename Half, typename Fn>
void zip_half_repeating(const Half* a, const Half* small, std::int64_t period, Half* out, std::int64_t count,
                        bool small_first, Fn fn) {
  if (period == 1) {
    const float value = static_cast<float>(small[0]);
    in_float32_chunks(
        out, count,
        [&](auto& in, float* result, std::int64_t, std::int64_t n) {
          zip_range_with_value(in[0], value, result, n, small_first, fn);
        },
        a);
    return;
  }
  std::vector<float> tiled(static_cast<std::size_t>(period + kHalfChunk));
  widen(small, tiled.data(), period);
  for (std::size_t i = static_cast<std::size_t>(period); i < tiled.size(); ++i) tiled[i] = tiled[i - static_cast<std::size_t>(period)];
  in_float32_chunks(
      out, count,
      [&](auto& in, float* result, std::int64_t start, std::int64_t n) {
        const float* repeated = tiled.data() + start % period;
        if (small_first) {
          zip_range(repeated, in[0], result, n, fn);
        } else {
          zip_range(in[0], repeated, result, n, fn);
        }
      },
      a);
}

// Whether `small` (its leading 1s dropped) is the trailing axes of `shape`: it repeats along
// the others.
bool repeats_along_leading_axes(const Shape& small, const Shape& shape) {
  std::size_t first = 0;
  while (first < small.size() && small[first] == 1) ++first;
  std::size_t kept = small.size() - first;
  if (kept > shape.size()) return false;
  for (std::size_t i = 0; i < kept; ++i) {
    if (small[first + i] != shape[shape.size() - kept + i]) return false;
  }
  return true;
}

// The kernel on float32 copies of its 16-bit tensors, the result rounded back: the cases the
// fused loops do not cover (broadcasting, comparisons), as engine/float32_compute.h does.
template <typename Kernel>
void on_float32_copies(const Tensor& a, const Tensor& b, Tensor& out, Kernel kernel) {
  Tensor wide_a = Tensor::empty(a.local_shape(), float32), wide_b = Tensor::empty(b.local_shape(), float32);
  cast(a, wide_a);
  cast(b, wide_b);
  if (!is_half_precision(out.dtype())) {
    kernel(wide_a, wide_b, out);
    return;
  }
  Tensor wide_out = Tensor::empty(out.local_shape(), float32);
  kernel(wide_a, wide_b, wide_out);
  cast(wide_out, out);
}

}  // namespace

void fill(Tensor& out, double value) {
  dispatch_dtype(out.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* data = elements_of<T>(out);
    T typed = scalar::convert<T>(value);
    parallel_for(out.size(), kParallelGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) data[i] = typed;
    });
  });
}

void cast(const Tensor& x, Tensor& out) {
  if (x.dtype() == out.dtype()) {
    if (x.raw_data() != out.raw_data()) std::memcpy(out.raw_data(), x.raw_data(), x.nbytes());
    return;
  }
  dispatch_dtype(x.dtype(), [&](auto in_zero) {
    using In = decltype(in_zero);
    dispatch_dtype(out.dtype(), [&](auto out_zero) {
      using Out = decltype(out_zero);
      const In* from = elements_of<In>(x);
      Out* to = elements_of<Out>(out);
      if constexpr ((std::is_same_v<In, float> && is_half_precision_type<Out>) ||
                    (is_half_precision_type<In> && std::is_same_v<Out, float>)) {
        // The passes of every 16-bit op (engine/float32_compute.h): vector loops.
        parallel_for(x.size(), kParallelGrain, [&](std::int64_t begin, std::int64_t end) {
          if constexpr (std::is_same_v<In, float>) {
            narrow(from + begin, to + begin, end - begin);
          } else {
            widen(from + begin, to + begin, end - begin);
          }
        });
      } else {
        map_contiguous(from, to, x.size(), [](In value) { return scalar::convert<Out>(value); });
      }
    });
  });
}

void unary(UnaryOp op, const Tensor& x, Tensor& out) {
  std::int64_t count = x.size();
  if (op == UnaryOp::relu && is_half_precision(x.dtype()) && out.dtype() == x.dtype()) {
    relu_of_half(x, out);  // selects 16-bit patterns: no float32 chunks (half_relu.h)
    return;
  }
  if (op == UnaryOp::logical_not) {
    map_contiguous(elements_of<bool>(x), elements_of<bool>(out), count, [](bool v) { return !v; });
    return;
  }
  // The op's element rule for T, handed to `run` (the loop over the storage).
  auto with_rule = [op](auto zero, auto run) {
    using T = decltype(zero);
    switch (op) {
#define KERAS_UNARY_CASE(name, floating_only, value)                  \
  case UnaryOp::name:                                                 \
    if constexpr (!(floating_only) || std::is_floating_point_v<T>) {  \
      run([](T v) { return value; });                                 \
    }                                                                 \
    break;
      KERAS_UNARY_OPS(KERAS_UNARY_CASE)
#undef KERAS_UNARY_CASE
      case UnaryOp::logical_not: break;  // bool, above
    }
  };
  if (dispatch_half_precision(x.dtype(), [&](auto half) {
        using Half = decltype(half);
        const Half* in = elements_of<Half>(x);
        Half* result = elements_of<Half>(out);
        with_rule(float{}, [&](auto fn) { map_half(in, result, count, fn); });
      })) {
    return;
  }
  dispatch_numeric(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* in = elements_of<T>(x);
    T* result = elements_of<T>(out);
    with_rule(zero, [&](auto fn) { map_contiguous(in, result, count, fn); });
  });
}

void unary_gradient(UnaryOp op, const Tensor& x, const Tensor& output_gradient,
                    Tensor& input_gradient) {
  if (op == UnaryOp::relu && is_half_precision(x.dtype()) && output_gradient.dtype() == x.dtype() &&
      input_gradient.dtype() == x.dtype()) {
    relu_gradient_of_half(x, output_gradient, input_gradient);
    return;
  }
  if (dispatch_half_precision(x.dtype(), [&](auto half) {
        using Half = decltype(half);
        using T = float;
        auto run = [&](auto derivative) {
          gradient_half(elements_of<Half>(x), elements_of<Half>(output_gradient),
                        elements_of<Half>(input_gradient), x.size(), derivative);
        };
        switch (op) {
#define KERAS_UNARY_GRADIENT_CASE(name, derivative) \
  case UnaryOp::name: run([](T v) { return derivative; }); break;
          KERAS_FUSED_UNARY_GRADIENTS(KERAS_UNARY_GRADIENT_CASE)
#undef KERAS_UNARY_GRADIENT_CASE
          default:
            throw Error(str("internal error: no fused gradient for ", unary_op_name(op)));
        }
      })) {
    return;
  }
  dispatch_floating(x.dtype(), unary_op_name(op), [&](auto zero) {
    using T = decltype(zero);
    const T* in = elements_of<T>(x);
    const T* grad = elements_of<T>(output_gradient);
    T* result = elements_of<T>(input_gradient);
    bool in_place = overlap(result, grad, x.size()) || overlap(result, in, x.size());
    auto run = [&](auto derivative) {
      parallel_for(x.size(), kParallelGrain, [&](std::int64_t begin, std::int64_t end) {
        if (in_place) {
          gradient_range_in_place(in, grad, result, begin, end, derivative);
        } else {
          gradient_range(in, grad, result, begin, end, derivative);
        }
      });
    };
    switch (op) {
#define KERAS_UNARY_GRADIENT_CASE(name, derivative) \
  case UnaryOp::name: run([](T v) { return derivative; }); break;
      KERAS_FUSED_UNARY_GRADIENTS(KERAS_UNARY_GRADIENT_CASE)
#undef KERAS_UNARY_GRADIENT_CASE
      default:
        throw Error(str("internal error: no fused gradient for ", unary_op_name(op)));
    }
  });
}

namespace {

template <typename T, typename Out, typename Fn>
void binary_loop(const Tensor& a, const Tensor& b, Tensor& out, Fn fn) {
  auto plan = make_plan<3>(out.shape(), {broadcast_strides(a.shape(), out.shape()),
                                         broadcast_strides(b.shape(), out.shape()),
                                         row_major_strides(out.shape())});
  const T* pa = elements_of<T>(a);
  const T* pb = elements_of<T>(b);
  Out* po = elements_of<Out>(out);
  for_each_row<3>(plan, [&](const std::array<std::int64_t, 3>& offsets,
                            const std::array<std::int64_t, 3>& strides, std::int64_t count) {
    const T* ra = pa + offsets[0];
    const T* rb = pb + offsets[1];
    Out* ro = po + offsets[2];
    // Separate loops for the stride patterns let the compiler vectorise each one.
    if (strides[0] == 1 && strides[1] == 1) {
      for (std::int64_t i = 0; i < count; ++i) ro[i] = fn(ra[i], rb[i]);
    } else if (strides[0] == 1 && strides[1] == 0) {
      T vb = rb[0];
      for (std::int64_t i = 0; i < count; ++i) ro[i] = fn(ra[i], vb);
    } else if (strides[0] == 0 && strides[1] == 1) {
      T va = ra[0];
      for (std::int64_t i = 0; i < count; ++i) ro[i] = fn(va, rb[i]);
    } else {
      for (std::int64_t i = 0; i < count; ++i) ro[i] = fn(ra[i * strides[0]], rb[i * strides[1]]);
    }
  });
}

}  // namespace

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  if (op == BinaryOp::logical_and || op == BinaryOp::logical_or) {
    if (op == BinaryOp::logical_and) {
      binary_loop<bool, bool>(a, b, out, [](bool x, bool y) { return x && y; });
    } else {
      binary_loop<bool, bool>(a, b, out, [](bool x, bool y) { return x || y; });
    }
    return;
  }
  if (is_half_precision(a.dtype())) {
    const Shape& shape = out.local_shape();
    const bool a_whole = a.local_shape() == shape, b_whole = b.local_shape() == shape;
    // Same shapes, or one operand repeating along the leading axes of the other (a bias, a
    // scalar): fused; other broadcasts and the comparisons on float32 copies.
    const bool fused = (a_whole && b_whole) || (a_whole && repeats_along_leading_axes(b.local_shape(), shape)) ||
                       (b_whole && repeats_along_leading_axes(a.local_shape(), shape));
    const bool arithmetic = op == BinaryOp::add || op == BinaryOp::subtract || op == BinaryOp::multiply ||
                            op == BinaryOp::divide || op == BinaryOp::maximum || op == BinaryOp::minimum;
    if (!fused || !arithmetic || out.size() == 0) {
      on_float32_copies(a, b, out, [op](const Tensor& x, const Tensor& y, Tensor& result) { binary(op, x, y, result); });
      return;
    }
    dispatch_half_precision(a.dtype(), [&](auto half) {
      using Half = decltype(half);
      const Half* pa = elements_of<Half>(a);
      const Half* pb = elements_of<Half>(b);
      Half* po = elements_of<Half>(out);
      auto run = [&](auto fn) {
        if (a_whole && b_whole) {
          zip_half(pa, pb, po, out.size(), fn);
          return;
        }
        const bool b_repeats = a_whole;
        const Tensor& small = b_repeats ? b : a;
        zip_half_repeating(b_repeats ? pa : pb, b_repeats ? pb : pa, small.size(), po, out.size(),
                           /*small_first=*/!b_repeats, fn);
      };
      switch (op) {
        case BinaryOp::add: run([](float x, float y) { return x + y; }); break;
        case BinaryOp::subtract: run([](float x, float y) { return x - y; }); break;
        case BinaryOp::multiply: run([](float x, float y) { return x * y; }); break;
        case BinaryOp::divide: run([](float x, float y) { return x / y; }); break;
        case BinaryOp::maximum: run([](float x, float y) { return scalar::maximum(x, y); }); break;
        default: run([](float x, float y) { return scalar::minimum(x, y); }); break;
      }
    });
    return;
  }
  dispatch_compute_dtype(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    switch (op) {
      case BinaryOp::equal: binary_loop<T, bool>(a, b, out, [](T x, T y) { return x == y; }); return;
      case BinaryOp::not_equal:
        binary_loop<T, bool>(a, b, out, [](T x, T y) { return x != y; });
        return;
      case BinaryOp::less: binary_loop<T, bool>(a, b, out, [](T x, T y) { return x < y; }); return;
      case BinaryOp::less_equal:
        binary_loop<T, bool>(a, b, out, [](T x, T y) { return x <= y; });
        return;
      case BinaryOp::greater: binary_loop<T, bool>(a, b, out, [](T x, T y) { return x > y; }); return;
      case BinaryOp::greater_equal:
        binary_loop<T, bool>(a, b, out, [](T x, T y) { return x >= y; });
        return;
      default: break;
    }
    if constexpr (!std::is_same_v<T, bool>) {
      switch (op) {
        case BinaryOp::add: binary_loop<T, T>(a, b, out, [](T x, T y) { return scalar::add(x, y); }); break;
        case BinaryOp::subtract:
          binary_loop<T, T>(a, b, out, [](T x, T y) { return scalar::subtract(x, y); });
          break;
        case BinaryOp::multiply:
          binary_loop<T, T>(a, b, out, [](T x, T y) { return scalar::multiply(x, y); });
          break;
        case BinaryOp::divide:
          if constexpr (std::is_integral_v<T>) {
            binary_loop<T, T>(a, b, out, [](T x, T y) {
              if (y == 0) {
                throw ValueError(str("divide: integer division by zero (", +x, " / 0); NumPy ",
                                     "would give 0 with a warning, we refuse"));
              }
              return scalar::divide_integer(x, y);
            });
          } else {
            binary_loop<T, T>(a, b, out, [](T x, T y) { return x / y; });
          }
          break;
        case BinaryOp::maximum:
          binary_loop<T, T>(a, b, out, [](T x, T y) { return scalar::maximum(x, y); });
          break;
        case BinaryOp::minimum:
          binary_loop<T, T>(a, b, out, [](T x, T y) { return scalar::minimum(x, y); });
          break;
        case BinaryOp::power:
          if constexpr (std::is_integral_v<T>) {
            binary_loop<T, T>(a, b, out, [](T x, T y) {
              if (y < T{}) {
                throw ValueError(str("power: integers to negative integer powers are not ",
                                     "allowed (got ", +x, " ** ", +y, "); cast to a floating ",
                                     "dtype first, as in NumPy"));
              }
              return scalar::power_integer(x, y);
            });
          } else {
            binary_loop<T, T>(a, b, out, [](T x, T y) { return std::pow(x, y); });
          }
          break;
        default: break;
      }
    }
  });
}

void where(const Tensor& condition, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_dtype(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    auto plan = make_plan<4>(out.shape(), {broadcast_strides(condition.shape(), out.shape()),
                                           broadcast_strides(a.shape(), out.shape()),
                                           broadcast_strides(b.shape(), out.shape()),
                                           row_major_strides(out.shape())});
    const bool* pc = elements_of<bool>(condition);
    const T* pa = elements_of<T>(a);
    const T* pb = elements_of<T>(b);
    T* po = elements_of<T>(out);
    for_each_row<4>(plan, [&](const std::array<std::int64_t, 4>& offsets,
                              const std::array<std::int64_t, 4>& strides, std::int64_t count) {
      for (std::int64_t i = 0; i < count; ++i) {
        po[offsets[3] + i] = pc[offsets[0] + i * strides[0]] ? pa[offsets[1] + i * strides[1]]
                                                             : pb[offsets[2] + i * strides[2]];
      }
    });
  });
}

}  // namespace keras::cpu
