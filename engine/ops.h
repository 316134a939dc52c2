// Every op of the engine, declared once. Each op's definition in engine/ops/ checks its
// arguments, calls the device's kernel (engine/backend.h) and records its gradient rule right
// beside the forward computation. Names and semantics follow keras.ops.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/random.h"
#include "engine/tensor.h"

namespace keras::ops {

// An empty Axes means "all axes" (Keras' axis=None).
using Axes = std::vector<std::int64_t>;

// Conversion. Differentiable between floating dtypes.
Tensor cast(const Tensor& x, DType dtype);

// Element-wise, one input.
Tensor negative(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // exact erf form, as keras.ops.gelu(approximate=False)
// The tanh form, as keras.ops.gelu(x, approximate=True) (keras.ops' default; the "gelu"
// activation string is the exact form).
Tensor gelu_approximate(const Tensor& x);
Tensor silu(const Tensor& x);  // x * sigmoid(x), as keras.ops.silu
Tensor logical_not(const Tensor& x);

// Element-wise, two inputs, NumPy broadcasting; both inputs must have the same dtype.
Tensor add(const Tensor& a, const Tensor& b);
Tensor subtract(const Tensor& a, const Tensor& b);
Tensor multiply(const Tensor& a, const Tensor& b);
Tensor divide(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor power(const Tensor& a, const Tensor& b);
// Comparisons and logic give bool tensors and have no gradient.
Tensor equal(const Tensor& a, const Tensor& b);
Tensor not_equal(const Tensor& a, const Tensor& b);
Tensor less(const Tensor& a, const Tensor& b);
Tensor less_equal(const Tensor& a, const Tensor& b);
Tensor greater(const Tensor& a, const Tensor& b);
Tensor greater_equal(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
// condition ? a : b, broadcasting all three; condition is bool.
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
// A scalar of x's dtype and device, for `x * 0.5` and friends.
Tensor scalar_like(const Tensor& x, double value);

// Reductions.
Tensor sum(const Tensor& x, const Axes& axes = {}, bool keepdims = false);
Tensor mean(const Tensor& x, const Axes& axes = {}, bool keepdims = false);
// The mean over `axes` (which include 0, the batch) of the whole batch: under a distribution,
// of every process's rows, not of this process's alone (the batch rule, engine/op_dispatch.h),
// as synchronized BatchNormalization's statistics are; on one process, mean().
Tensor batch_mean(const Tensor& x, const Axes& axes, bool keepdims = false);
Tensor max(const Tensor& x, const Axes& axes = {}, bool keepdims = false);
Tensor min(const Tensor& x, const Axes& axes = {}, bool keepdims = false);
Tensor var(const Tensor& x, const Axes& axes = {}, bool keepdims = false);
Tensor argmax(const Tensor& x, std::int64_t axis = -1);
Tensor argmin(const Tensor& x, std::int64_t axis = -1);

// Linear algebra: a @ b over the last two axes. a of rank >= 2 with b of rank 2 multiplies
// every row; two inputs of rank >= 3 need equal leading (batch) dimensions.
Tensor matmul(const Tensor& a, const Tensor& b);
// Two-operand einsum as numpy.einsum reads it ("btd,dnh->btnh", "...b,bc->...c", implicit
// outputs), lowered to one batched matmul; a letter must have one size in both operands.
Tensor einsum(const std::string& equation, const Tensor& a, const Tensor& b);

// Shapes. reshape shares the data; one dimension may be -1.
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, const std::vector<std::int64_t>& permutation = {});
Tensor expand_dims(const Tensor& x, std::int64_t axis);
Tensor squeeze(const Tensor& x, std::int64_t axis);
Tensor broadcast_to(const Tensor& x, const Shape& shape);
// x[starts[0] : starts[0]+sizes[0], …]; a size of -1 means "to the end".
Tensor slice(const Tensor& x, const Shape& starts, const Shape& sizes);
Tensor concatenate(const std::vector<Tensor>& tensors, std::int64_t axis = 0);
// Gathers along axis with int32/int64 indices (negative indices count from the end);
// the result's shape is x.shape[:axis] + indices.shape + x.shape[axis+1:].
Tensor take(const Tensor& x, const Tensor& indices, std::int64_t axis = 0);
// Throws ValueError(`message` with "{}" replaced by the index) for an index of `indices`
// (int32 or int64) outside [lower, upper): at once on the CPU, at the next read from the device
// on a GPU, so that a step on a GPU does not wait to learn its indices were fine
// (engine/index_check.h).
void check_indices(const Tensor& indices, std::int64_t lower, std::int64_t upper,
                   const std::string& message);
Tensor one_hot(const Tensor& indices, std::int64_t depth, DType dtype = float32);

// Neural-network functions.
Tensor softmax(const Tensor& x, std::int64_t axis = -1);
Tensor log_softmax(const Tensor& x, std::int64_t axis = -1);
// BatchNormalization's training step as one op (TensorFlow's fused_batch_norm): x normalised
// by the mean and biased variance of every axis but `axis` (the channels), times gamma plus
// beta (each of shape (channels), undefined for none), in x's dtype. The statistics are
// computed in float32 for bfloat16 and float16 x (Keras' rule), in x's dtype otherwise, and
// returned through batch_mean and batch_variance when given (no gradient flows through them).
// The gradient flows to x, gamma and beta through the statistics.
Tensor fused_batch_normalization(const Tensor& x, const Tensor& gamma, const Tensor& beta, std::int64_t axis,
                                 double epsilon, Tensor* batch_mean = nullptr, Tensor* batch_variance = nullptr);
// LayerNormalization's call as one op: each line of the last axis normalised by its own mean
// and biased variance, (x - mean) / sqrt(variance + epsilon) * gamma + beta (each of shape
// (features), undefined for none), in x's dtype, the statistics in float32 for bfloat16 and
// float16 x. The gradient flows to x, gamma and beta.
Tensor fused_layer_normalization(const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon);

// Sliding windows over channels_last images (batch, height, width, channels), Keras' default
// data_format; "channels_first" is refused (NotImplementedError). strides, dilation_rate and
// pool_size take one entry (both axes) or two (height, width); padding is "valid" or "same"
// (output = ceil(input / stride), the padding split as TensorFlow and JAX split it).
// keras.ops.conv in 2-D: kernel (kernel_height, kernel_width, channels / groups, filters), the
// groups inferred as channels / kernel.shape[2].
Tensor conv(const Tensor& inputs, const Tensor& kernel, const std::vector<std::int64_t>& strides = {1},
            const std::string& padding = "valid", const std::string& data_format = "channels_last",
            const std::vector<std::int64_t>& dilation_rate = {1});
// keras.ops.max_pool / average_pool; strides default to pool_size. average_pool with "same"
// divides by the elements each window covers, not counting padding (Keras' JAX backend).
Tensor max_pool(const Tensor& inputs, const std::vector<std::int64_t>& pool_size,
                const std::vector<std::int64_t>& strides = {}, const std::string& padding = "valid",
                const std::string& data_format = "channels_last");
Tensor average_pool(const Tensor& inputs, const std::vector<std::int64_t>& pool_size,
                    const std::vector<std::int64_t>& strides = {},
                    const std::string& padding = "valid",
                    const std::string& data_format = "channels_last");

// Random tensors, a pure function of (spec.seed, element index): see engine/random.h.
Tensor random(const RandomSpec& spec, const Shape& shape, DType dtype = float32,
              Device device = Device::cpu());
// The block [starts, starts + shape) of the random tensor of `full_shape`.
Tensor random_slice(const RandomSpec& spec, const Shape& full_shape, const Shape& starts,
                    const Shape& shape, DType dtype = float32, Device device = Device::cpu());
// keras.random.dropout: each element of `x` kept with probability 1 - rate and scaled by
// 1 / (1 - rate), or zeroed; the mask is the uniform draw of Philox key `key` over x's shape.
// Under a distribution every process draws its block of the one-process mask (the random rule,
// engine/op_dispatch.h): the numbers equal one process's on any mesh.
Tensor dropout(const Tensor& x, double rate, std::uint64_t key);

}  // namespace keras::ops

namespace keras {
// Arithmetic operators, for readable formulas in layers and losses.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
}  // namespace keras
