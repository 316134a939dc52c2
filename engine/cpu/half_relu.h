// ReLU and its gradient on bfloat16 and float16 tensors by selecting 16-bit patterns, where the
// other 16-bit element-wise ops widen a chunk to float32, compute and round back
// (engine/cpu/elementwise.cpp). A selected value or a signed zero is exact in 16 bits, so every
// non-NaN result is, bit for bit, the float32 rule's result rounded once (the op table's
// rule, engine/float32_compute.h), and a NaN result is a quiet NaN of the dtype. Why: on the
// guide's convnet under mixed_bfloat16, ReLU's forward and backward chunks (three conversions
// an element for the gradient, two for the forward) were about 5% of the step's samples in
// perf on the Xeon VM of 2026-12-07, where conversions are most of what mixed precision costs
// there. Measured: the 1-thread step 44.55 -> 44.15 ms (medians of 6 interleaved pairs, every
// pair faster), the conversions' memory passes elsewhere being the larger part.
#pragma once
#include "engine/tensor.h"

namespace keras::cpu {

// out = relu(x); x and out of one 16-bit dtype (out may be x).
void relu_of_half(const Tensor& x, Tensor& out);

// input_gradient = output_gradient * relu'(x); all three of one 16-bit dtype (the output may be
// either input).
void relu_gradient_of_half(const Tensor& x, const Tensor& output_gradient, Tensor& input_gradient);

}  // namespace keras::cpu
