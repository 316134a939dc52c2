// The kernels an op may call. Each device kind implements all of them once: engine/cpu/ on
// Eigen and oneDNN, engine/cuda/ for GPUs. Ops (engine/ops/) allocate outputs, check arguments
// and attach gradient rules; kernels only compute, and may assume their arguments are valid
// (same device, matching dtypes, output already allocated with the right shape).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/random.h"
#include "engine/tensor.h"

namespace keras {

enum class UnaryOp {
  negative, abs, sign, exp, log, sqrt, rsqrt, square, reciprocal, tanh, sigmoid, relu, gelu,
  logical_not
};
enum class BinaryOp {
  add, subtract, multiply, divide, maximum, minimum, power,
  equal, not_equal, less, less_equal, greater, greater_equal, logical_and, logical_or
};
enum class ReduceOp { sum, max, min };

struct SgdUpdate {
  double learning_rate = 0.01;
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
};

struct AdamUpdate {
  double learning_rate = 0.001;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  double weight_decay = 0.0;  // decoupled (AdamW); 0 for Adam
  std::int64_t step = 1;      // 1-based, for bias correction
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual void fill(Tensor& out, double value) = 0;
  // Converts x's elements to out's dtype (a plain copy when they match).
  virtual void cast(const Tensor& x, Tensor& out) = 0;
  virtual void unary(UnaryOp op, const Tensor& x, Tensor& out) = 0;
  // input_gradient = output_gradient * op'(x), fused (relu, gelu, tanh, sigmoid).
  virtual void unary_gradient(UnaryOp op, const Tensor& x, const Tensor& output_gradient,
                              Tensor& input_gradient) = 0;
  // NumPy broadcasting from a and b to out's shape.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual void where(const Tensor& condition, const Tensor& a, const Tensor& b, Tensor& out) = 0;
  // Reduces over `axes` (sorted, unique); out has x's rank with those axes set to 1.
  virtual void reduce(ReduceOp op, const Tensor& x, const std::vector<int>& axes,
                      Tensor& out) = 0;
  // Index (int64) of the largest (or smallest) element along `axis`; out drops that axis.
  virtual void arg_reduce(bool largest, const Tensor& x, int axis, Tensor& out) = 0;
  // out = op(a) @ op(b) on the last two axes; rank 2, or rank 3 with a shared batch axis.
  virtual void matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b,
                      Tensor& out) = 0;
  virtual void transpose(const Tensor& x, const std::vector<int>& permutation, Tensor& out) = 0;
  // out = x[starts[0] : starts[0]+out.dim(0), …].
  virtual void copy_slice(const Tensor& x, const Shape& starts, Tensor& out) = 0;
  // destination[starts[0] : starts[0]+source.dim(0), …] = source.
  virtual void write_slice(const Tensor& source, const Shape& starts, Tensor& destination) = 0;
  // Gathers along axis; indices are int32/int64 and already range-checked by the op.
  virtual void take(const Tensor& x, const Tensor& indices, int axis, Tensor& out) = 0;
  // input_gradient (zero-filled by the kernel) += scatter of output_gradient at indices.
  virtual void take_gradient(const Tensor& output_gradient, const Tensor& indices, int axis,
                             Tensor& input_gradient) = 0;
  // out[..., indices[...]] = 1, 0 elsewhere; out's last axis is the depth.
  virtual void one_hot(const Tensor& indices, Tensor& out) = 0;
  virtual void softmax(const Tensor& x, int axis, bool log, Tensor& out) = 0;
  // Gradient of softmax (log=false) or log_softmax (log=true) from its output y.
  virtual void softmax_gradient(const Tensor& y, const Tensor& output_gradient, int axis,
                                bool log, Tensor& input_gradient) = 0;
  // Fills out with the block of a `full_shape` random tensor that starts at `starts`.
  virtual void random(const RandomSpec& spec, const Shape& full_shape, const Shape& starts,
                      Tensor& out) = 0;
  // In-place optimizer updates; velocity / moments are updated too.
  virtual void sgd_update(const SgdUpdate& settings, Tensor& variable, const Tensor& gradient,
                          Tensor& velocity) = 0;
  virtual void adam_update(const AdamUpdate& settings, Tensor& variable, const Tensor& gradient,
                           Tensor& first_moment, Tensor& second_moment) = 0;
};

Backend& backend_for(Device device);
Backend& cpu_backend();
Backend& gpu_backend();  // engine/cuda/ or engine/no_gpu/

const char* unary_op_name(UnaryOp op);
const char* binary_op_name(BinaryOp op);

}  // namespace keras
