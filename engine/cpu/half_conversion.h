// Bulk conversions between float32 and bfloat16 or float16, the passes every op on a 16-bit
// tensor makes (engine/float32_compute.h). Measured on the transformer step under
// mixed_bfloat16 (perf, 1 thread): the element-by-element conversion loops took 13% of the
// step; these use 8-wide AVX2 (bfloat16: integer rounding) and F16C (float16: the CPU's own
// rounding), which the x86-64-v3 build target guarantees, with the scalar rules
// (engine/half_precision.h) elsewhere and for the tail. Same results bit for bit.
#pragma once
#include <cstdint>
#include <type_traits>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/half_precision.h"
#include "engine/tensor.h"

namespace keras::cpu {

void widen(const BFloat16* in, float* out, std::int64_t count);
void widen(const Float16* in, float* out, std::int64_t count);
void narrow(const float* in, BFloat16* out, std::int64_t count);
void narrow(const float* in, Float16* out, std::int64_t count);

// For the kernels that take 16-bit tensors natively but compute some of them in float32
// (matmul and convolution where the CPU has no bf16 instructions, and always for float16):
// a float32 copy of a 16-bit tensor (any other tensor as it is), and a float32 result rounded
// once into the 16-bit `out` after `compute(result)` has written it.
Tensor float32_copy(const Tensor& x);
template <typename Compute>
void round_into(Tensor& out, Compute&& compute) {
  Tensor wide = Tensor::empty(out.local_shape(), float32, out.device());
  compute(wide);
  cast(wide, out);
}

// For the kernels that read 16-bit tensors a block or a line at a time (normalizations,
// reductions): the type an element type computes in, float for the 16-bit types and the type
// itself for every other; and a dispatch over the four floating types.
template <typename Element>
using ComputeType = std::conditional_t<is_half_precision_type<Element>, float, Element>;
template <typename Element>
constexpr bool computes_as_stored = std::is_same_v<Element, ComputeType<Element>>;
template <typename Fn>
void dispatch_floating_or_half(DType dtype, const char* what, Fn&& fn) {
  if (dispatch_half_precision(dtype, fn)) return;
  dispatch_floating(dtype, what, fn);
}

// Whether a loop can read an element type in place, converting in registers: the types that
// compute as stored, and bfloat16, whose widening is a shift compilers vectorise (float16's is
// not: it is widened a block at a time by in_compute_type). A loop bound by its arithmetic
// then hides the reads, where a widening pass first is one more pass through memory.
template <typename Element>
constexpr bool reads_in_registers = computes_as_stored<Element> || std::is_same_v<Element, BFloat16>;

// `count` elements in their compute type: the tensor's own for all but the 16-bit types, which
// are widened into `buffer` (beside the thread, in cache).
template <typename Element>
const ComputeType<Element>* in_compute_type(const Element* x, std::int64_t count, std::vector<float>& buffer) {
  if constexpr (computes_as_stored<Element>) {
    return x;
  } else {
    buffer.resize(static_cast<std::size_t>(count));
    widen(x, buffer.data(), count);
    return buffer.data();
  }
}

// `count` elements as a loop should read them, each through static_cast<ComputeType<Element>>:
// in place where the loop converts in registers (reads_in_registers), else widened into
// `buffer` by in_compute_type.
template <typename Element>
auto readable_values(const Element* x, std::int64_t count, std::vector<float>& buffer) {
  if constexpr (reads_in_registers<Element>) {
    return x;
  } else {
    return in_compute_type(x, count, buffer);
  }
}

// compute(destination) writes `count` results in the compute type: straight into out for
// float32 and float64, into `buffer` and rounded once into out for 16-bit ones.
template <typename Element, typename Compute>
void write_from_compute_type(Element* out, std::int64_t count, std::vector<float>& buffer, Compute&& compute) {
  if constexpr (computes_as_stored<Element>) {
    compute(out);
  } else {
    buffer.resize(static_cast<std::size_t>(count));
    compute(buffer.data());
    narrow(buffer.data(), out, count);
  }
}

}  // namespace keras::cpu
