// Every kernel a backend implements, listed once. Adding a kernel means adding one line here
// and its implementation in each backend folder (engine/cpu/, engine/cuda/); the Backend
// interface (engine/backend.h), the CPU binding (engine/cpu/cpu_backend.cpp), the CPU
// declarations (engine/cpu/kernels.h) and the "no GPU implementation" backend
// (engine/unimplemented_backend.h) are all generated from this list.
//
// KERAS_KERNELS(X) calls X(name, parameters, arguments) for each kernel: `parameters` is the
// parenthesised parameter list, `arguments` the same names as a call's argument list.
// Contracts (kernels only compute; ops check arguments first):
//   fill            out = value
//   cast            out = x converted to out's dtype (a plain copy when they match)
//   unary           out = op(x)
//   unary_gradient  input_gradient = output_gradient * op'(x), fused (relu, gelu, tanh, sigmoid)
//   binary          out = op(a, b) with NumPy broadcasting from a and b to out's shape
//   where           out = condition ? a : b, broadcasting
//   reduce          over `axes` (sorted, unique); out has x's rank with those axes set to 1
//   arg_reduce      int64 index of the largest (or smallest) element along axis; out drops it
//   matmul          out = op(a) @ op(b) on the last two axes; rank 2, or rank 3 with a batch axis
//   transpose       out = x with its axes permuted
//   copy_slice      out = x[starts[0] : starts[0] + out.dim(0), …]
//   write_slice     destination[starts[0] : starts[0] + source.dim(0), …] = source
//   check_indices   ValueError for an index outside [check.lower, check.upper): thrown at once
//                   on the CPU, at the next read from the device on a GPU (engine/index_check.h)
//   take            gathers along axis; indices int32/int64, checked by check_indices first
//   take_gradient   input_gradient (zero-filled by the kernel) += scatter of output_gradient
//   one_hot         out[..., indices[...]] = 1, 0 elsewhere; out's last axis is the depth
//   softmax         softmax (log=false) or log_softmax (log=true) along axis
//   softmax_gradient  their gradient from the output y
//   random          the block at `starts` of the `full_shape` random tensor of `spec`
//   sgd_update / adam_update / rmsprop_update / adagrad_update  in-place optimizer steps
//                   (their slots updated too; a slot the settings do not use is undefined)
//   convolution     out (batch, out_h, out_w, filters) = input (batch, h, w, channels)
//                   convolved with kernel (window_h, window_w, channels / groups, filters)
//   convolution_input_gradient / convolution_kernel_gradient  its gradients (each overwritten)
//   pool            max or average over each window, per channel (engine/window_rules.h)
//   pool_gradient   its input gradient (overwritten)
//   batch_normalization_statistics  mean and biased variance of x over every axis but `axis`
//                   (one value per channel, x's dtype, float32 for 16-bit x)
//   channel_affine  out = x * multiplier[c] + offset[c], c the index along `axis`
//   batch_normalization_gradient  the input gradient of (x - mean) * inverse * scale + offset
//                   through the batch statistics, and per channel sum(g) and
//                   sum(g * (x - mean)) (engine/batch_normalization_rules.h)
//   layer_normalization  each line of the last axis normalised by its own mean and variance,
//                   times gamma plus beta (per feature); the lines' mean and inverse deviation
//                   kept (engine/line_rules.h)
//   layer_normalization_gradient  its input gradient, and gamma's and beta's (sums over lines)
#pragma once

#define KERAS_KERNELS(X)                                                                        \
  X(fill, (Tensor & out, double value), (out, value))                                           \
  X(cast, (const Tensor& x, Tensor& out), (x, out))                                             \
  X(unary, (UnaryOp op, const Tensor& x, Tensor& out), (op, x, out))                            \
  X(unary_gradient,                                                                             \
    (UnaryOp op, const Tensor& x, const Tensor& output_gradient, Tensor& input_gradient),       \
    (op, x, output_gradient, input_gradient))                                                   \
  X(binary, (BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out), (op, a, b, out))      \
  X(where, (const Tensor& condition, const Tensor& a, const Tensor& b, Tensor& out),            \
    (condition, a, b, out))                                                                     \
  X(reduce, (ReduceOp op, const Tensor& x, const std::vector<int>& axes, Tensor& out),          \
    (op, x, axes, out))                                                                         \
  X(arg_reduce, (bool largest, const Tensor& x, int axis, Tensor& out), (largest, x, axis, out)) \
  X(matmul, (const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, Tensor& out), \
    (a, b, transpose_a, transpose_b, out))                                                      \
  X(transpose, (const Tensor& x, const std::vector<int>& permutation, Tensor& out),             \
    (x, permutation, out))                                                                      \
  X(copy_slice, (const Tensor& x, const Shape& starts, Tensor& out), (x, starts, out))          \
  X(write_slice, (const Tensor& source, const Shape& starts, Tensor& destination),              \
    (source, starts, destination))                                                              \
  X(check_indices, (const Tensor& indices, const IndexCheck& check), (indices, check))         \
  X(take, (const Tensor& x, const Tensor& indices, int axis, Tensor& out), (x, indices, axis, out)) \
  X(take_gradient,                                                                              \
    (const Tensor& output_gradient, const Tensor& indices, int axis, Tensor& input_gradient),   \
    (output_gradient, indices, axis, input_gradient))                                           \
  X(one_hot, (const Tensor& indices, Tensor& out), (indices, out))                              \
  X(softmax, (const Tensor& x, int axis, bool log, Tensor& out), (x, axis, log, out))           \
  X(softmax_gradient,                                                                           \
    (const Tensor& y, const Tensor& output_gradient, int axis, bool log, Tensor& input_gradient), \
    (y, output_gradient, axis, log, input_gradient))                                            \
  X(random, (const RandomSpec& spec, const Shape& full_shape, const Shape& starts, Tensor& out), \
    (spec, full_shape, starts, out))                                                            \
  X(sgd_update,                                                                                 \
    (const SgdUpdate& settings, Tensor& variable, const Tensor& gradient, Tensor& velocity),    \
    (settings, variable, gradient, velocity))                                                   \
  X(adam_update,                                                                                \
    (const AdamUpdate& settings, Tensor& variable, const Tensor& gradient,                      \
     Tensor& first_moment, Tensor& second_moment),                                              \
    (settings, variable, gradient, first_moment, second_moment))                                \
  X(rmsprop_update,                                                                             \
    (const RmspropUpdate& settings, Tensor& variable, const Tensor& gradient, Tensor& velocity,  \
     Tensor& momentum, Tensor& average_gradient),                                               \
    (settings, variable, gradient, velocity, momentum, average_gradient))                       \
  X(adagrad_update,                                                                             \
    (const AdagradUpdate& settings, Tensor& variable, const Tensor& gradient, Tensor& accumulator), \
    (settings, variable, gradient, accumulator))                                                \
  X(convolution,                                                                                \
    (const Tensor& input, const Tensor& kernel, const WindowGeometry& geometry, Tensor& out),    \
    (input, kernel, geometry, out))                                                             \
  X(convolution_input_gradient,                                                                 \
    (const Tensor& output_gradient, const Tensor& kernel, const WindowGeometry& geometry,       \
     Tensor& input_gradient),                                                                   \
    (output_gradient, kernel, geometry, input_gradient))                                        \
  X(convolution_kernel_gradient,                                                                \
    (const Tensor& input, const Tensor& output_gradient, const WindowGeometry& geometry,        \
     Tensor& kernel_gradient),                                                                  \
    (input, output_gradient, geometry, kernel_gradient))                                        \
  X(pool, (PoolOp op, const Tensor& input, const WindowGeometry& geometry, Tensor& out),        \
    (op, input, geometry, out))                                                                 \
  X(pool_gradient,                                                                              \
    (PoolOp op, const Tensor& input, const Tensor& output_gradient,                             \
     const WindowGeometry& geometry, Tensor& input_gradient),                                   \
    (op, input, output_gradient, geometry, input_gradient))                                     \
  X(batch_normalization_statistics, (const Tensor& x, int axis, Tensor& mean, Tensor& variance), \
    (x, axis, mean, variance))                                                                  \
  X(channel_affine,                                                                             \
    (const Tensor& x, const Tensor& multiplier, const Tensor& offset, int axis, Tensor& out),   \
    (x, multiplier, offset, axis, out))                                                         \
  X(batch_normalization_gradient,                                                               \
    (const Tensor& x, const Tensor& output_gradient, const Tensor& mean, const Tensor& inverse, \
     const Tensor& scale, int axis, Tensor& input_gradient, Tensor& gradient_sum,               \
     Tensor& centered_gradient_sum),                                                            \
    (x, output_gradient, mean, inverse, scale, axis, input_gradient, gradient_sum,              \
     centered_gradient_sum))                                                                    \
  X(layer_normalization,                                                                        \
    (const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon, Tensor& out,     \
     Tensor& mean, Tensor& inverse),                                                            \
    (x, gamma, beta, epsilon, out, mean, inverse))                                              \
  X(layer_normalization_gradient,                                                               \
    (const Tensor& x, const Tensor& output_gradient, const Tensor& mean, const Tensor& inverse, \
     const Tensor& gamma, Tensor& input_gradient, Tensor& gamma_gradient, Tensor& beta_gradient), \
    (x, output_gradient, mean, inverse, gamma, input_gradient, gamma_gradient, beta_gradient))

// What engine/float32_compute.h must know of a kernel to run it on bfloat16 and float16,
// declared here beside the kernels so that a new kernel states it where it is added (each name
// is checked to be a kernel of the list above when float32_compute.h compiles).
// The kernels that only move or convert elements: every backend runs them on 16-bit tensors as
// they are.
#define KERAS_KERNELS_THAT_ONLY_MOVE_ELEMENTS(X) \
  X(fill) X(cast) X(transpose) X(copy_slice) X(write_slice) X(check_indices) X(take) X(one_hot) X(where)
// The kernels whose non-const tensors are read as well as written (the optimizer updates: the
// variable and its slots), so their float32 stand-ins start from the current values; every
// other kernel's outputs are only written.
#define KERAS_KERNELS_THAT_READ_THEIR_OUTPUTS(X) X(sgd_update) X(adam_update) X(rmsprop_update) X(adagrad_update)
