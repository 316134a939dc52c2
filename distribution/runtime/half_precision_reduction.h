// Element-wise reductions of bfloat16 and float16 buffers for the transports that have none of
// their own (MPI's and Gloo's built-in reductions know no 16-bit floats; NCCL's do): each pair
// of elements is combined in float32 and rounded once, as NCCL reduces bf16. Used by
// gradient compression (gradient_reducer.h) and by activations that cross processes in the
// compute dtype under a mixed policy.
#pragma once
#include <cstddef>
#include <cstdint>

#include "distribution/runtime/communicator.h"
#include "engine/half_precision.h"

namespace keras::distribution::half_precision {

// out[i] = operation(a[i], b[i]); out may be a or b.
template <typename Half>
void reduce(ReduceOperation operation, Half* out, const Half* a, const Half* b, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    float result;
    switch (operation) {
      case ReduceOperation::max: result = (x != x || y != y) ? x + y : (x > y ? x : y); break;
      case ReduceOperation::min: result = (x != x || y != y) ? x + y : (x < y ? x : y); break;
      default: result = x + y; break;  // sum, and mean's sum
    }
    out[i] = Half(result);
  }
}

// Divides each element by `divisor` (mean = sum / size), rounding once.
template <typename Half>
void divide(Half* data, std::size_t count, int divisor) {
  for (std::size_t i = 0; i < count; ++i) data[i] = Half(static_cast<float>(data[i]) / static_cast<float>(divisor));
}

}  // namespace keras::distribution::half_precision
