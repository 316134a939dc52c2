// Binds the CPU kernels to the Backend interface, and maps devices to backends.
#include "engine/cpu/kernels.h"

namespace keras {
namespace {

class CpuBackend final : public Backend {
 public:
  void fill(Tensor& out, double value) override { cpu::fill(out, value); }
  void cast(const Tensor& x, Tensor& out) override { cpu::cast(x, out); }
  void unary(UnaryOp op, const Tensor& x, Tensor& out) override { cpu::unary(op, x, out); }
  void unary_gradient(UnaryOp op, const Tensor& x, const Tensor& output_gradient,
                      Tensor& input_gradient) override {
    cpu::unary_gradient(op, x, output_gradient, input_gradient);
  }
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override {
    cpu::binary(op, a, b, out);
  }
  void where(const Tensor& condition, const Tensor& a, const Tensor& b, Tensor& out) override {
    cpu::where(condition, a, b, out);
  }
  void reduce(ReduceOp op, const Tensor& x, const std::vector<int>& axes, Tensor& out) override {
    cpu::reduce(op, x, axes, out);
  }
  void arg_reduce(bool largest, const Tensor& x, int axis, Tensor& out) override {
    cpu::arg_reduce(largest, x, axis, out);
  }
  void matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b,
              Tensor& out) override {
    cpu::matmul(a, b, transpose_a, transpose_b, out);
  }
  void transpose(const Tensor& x, const std::vector<int>& permutation, Tensor& out) override {
    cpu::transpose(x, permutation, out);
  }
  void copy_slice(const Tensor& x, const Shape& starts, Tensor& out) override {
    cpu::copy_slice(x, starts, out);
  }
  void write_slice(const Tensor& source, const Shape& starts, Tensor& destination) override {
    cpu::write_slice(source, starts, destination);
  }
  void take(const Tensor& x, const Tensor& indices, int axis, Tensor& out) override {
    cpu::take(x, indices, axis, out);
  }
  void take_gradient(const Tensor& output_gradient, const Tensor& indices, int axis,
                     Tensor& input_gradient) override {
    cpu::take_gradient(output_gradient, indices, axis, input_gradient);
  }
  void one_hot(const Tensor& indices, Tensor& out) override { cpu::one_hot(indices, out); }
  void softmax(const Tensor& x, int axis, bool log, Tensor& out) override {
    cpu::softmax(x, axis, log, out);
  }
  void softmax_gradient(const Tensor& y, const Tensor& output_gradient, int axis, bool log,
                        Tensor& input_gradient) override {
    cpu::softmax_gradient(y, output_gradient, axis, log, input_gradient);
  }
  void random(const RandomSpec& spec, const Shape& full_shape, const Shape& starts,
              Tensor& out) override {
    cpu::random(spec, full_shape, starts, out);
  }
  void sgd_update(const SgdUpdate& settings, Tensor& variable, const Tensor& gradient,
                  Tensor& velocity) override {
    cpu::sgd_update(settings, variable, gradient, velocity);
  }
  void adam_update(const AdamUpdate& settings, Tensor& variable, const Tensor& gradient,
                   Tensor& first_moment, Tensor& second_moment) override {
    cpu::adam_update(settings, variable, gradient, first_moment, second_moment);
  }
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

Backend& backend_for(Device device) {
  return device.is_cpu() ? cpu_backend() : gpu_backend();
}

const char* unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::negative: return "negative";
    case UnaryOp::abs: return "abs";
    case UnaryOp::sign: return "sign";
    case UnaryOp::exp: return "exp";
    case UnaryOp::log: return "log";
    case UnaryOp::sqrt: return "sqrt";
    case UnaryOp::rsqrt: return "rsqrt";
    case UnaryOp::square: return "square";
    case UnaryOp::reciprocal: return "reciprocal";
    case UnaryOp::tanh: return "tanh";
    case UnaryOp::sigmoid: return "sigmoid";
    case UnaryOp::relu: return "relu";
    case UnaryOp::gelu: return "gelu";
    case UnaryOp::logical_not: return "logical_not";
  }
  return "unknown";
}

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::subtract: return "subtract";
    case BinaryOp::multiply: return "multiply";
    case BinaryOp::divide: return "divide";
    case BinaryOp::maximum: return "maximum";
    case BinaryOp::minimum: return "minimum";
    case BinaryOp::power: return "power";
    case BinaryOp::equal: return "equal";
    case BinaryOp::not_equal: return "not_equal";
    case BinaryOp::less: return "less";
    case BinaryOp::less_equal: return "less_equal";
    case BinaryOp::greater: return "greater";
    case BinaryOp::greater_equal: return "greater_equal";
    case BinaryOp::logical_and: return "logical_and";
    case BinaryOp::logical_or: return "logical_or";
  }
  return "unknown";
}

}  // namespace keras
