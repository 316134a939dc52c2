// The CPU backend's kernels, one group per file in engine/cpu/. engine/cpu/cpu_backend.cpp binds
// them to the Backend interface.
#pragma once
#include "engine/backend.h"

namespace keras::cpu {

void fill(Tensor& out, double value);
void cast(const Tensor& x, Tensor& out);
void unary(UnaryOp op, const Tensor& x, Tensor& out);
void unary_gradient(UnaryOp op, const Tensor& x, const Tensor& output_gradient,
                    Tensor& input_gradient);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
void where(const Tensor& condition, const Tensor& a, const Tensor& b, Tensor& out);
void reduce(ReduceOp op, const Tensor& x, const std::vector<int>& axes, Tensor& out);
void arg_reduce(bool largest, const Tensor& x, int axis, Tensor& out);
void matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, Tensor& out);
void transpose(const Tensor& x, const std::vector<int>& permutation, Tensor& out);
void copy_slice(const Tensor& x, const Shape& starts, Tensor& out);
void write_slice(const Tensor& source, const Shape& starts, Tensor& destination);
void take(const Tensor& x, const Tensor& indices, int axis, Tensor& out);
void take_gradient(const Tensor& output_gradient, const Tensor& indices, int axis,
                   Tensor& input_gradient);
void one_hot(const Tensor& indices, Tensor& out);
void softmax(const Tensor& x, int axis, bool log, Tensor& out);
void softmax_gradient(const Tensor& y, const Tensor& output_gradient, int axis, bool log,
                      Tensor& input_gradient);
void random(const RandomSpec& spec, const Shape& full_shape, const Shape& starts, Tensor& out);
void sgd_update(const SgdUpdate& settings, Tensor& variable, const Tensor& gradient,
                Tensor& velocity);
void adam_update(const AdamUpdate& settings, Tensor& variable, const Tensor& gradient,
                 Tensor& first_moment, Tensor& second_moment);

}  // namespace keras::cpu
