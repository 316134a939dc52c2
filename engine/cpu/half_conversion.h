// Bulk conversions between float32 and bfloat16 or float16, the passes every op on a 16-bit
// tensor makes (engine/float32_compute.h). Measured on the transformer step under
// mixed_bfloat16 (perf, 1 thread): the element-by-element conversion loops took 13% of the
// step; these use 8-wide AVX2 (bfloat16: integer rounding) and F16C (float16: the CPU's own
// rounding), which the x86-64-v3 build target guarantees, with the scalar rules
// (engine/half_precision.h) elsewhere and for the tail. Same results bit for bit.
#pragma once
#include <cstdint>

#include "engine/half_precision.h"

namespace keras::cpu {

void widen(const BFloat16* in, float* out, std::int64_t count);
void widen(const Float16* in, float* out, std::int64_t count);
void narrow(const float* in, BFloat16* out, std::int64_t count);
void narrow(const float* in, Float16* out, std::int64_t count);

}  // namespace keras::cpu
