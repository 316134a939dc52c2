// Bulk conversions between float32 and bfloat16 or float16, the passes every op on a 16-bit
// tensor makes (engine/float32_compute.h). Measured on the transformer step under
// mixed_bfloat16 (perf, 1 thread): the element-by-element conversion loops took 13% of the
// step; these use 8-wide AVX2 (bfloat16: integer rounding) and F16C (float16: the CPU's own
// rounding), which the x86-64-v3 build target guarantees, with the scalar rules
// (engine/half_precision.h) elsewhere and for the tail. Same results bit for bit.
#pragma once
#include <cstdint>

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

}  // namespace keras::cpu
