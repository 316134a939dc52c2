// A Backend whose every kernel throws NotImplementedError naming the kernel and the reason.
// A CPU-only build uses it for the GPU (engine/no_gpu/); so does the CUDA build for kernels that
// have no CUDA implementation yet (engine/cuda/).
#pragma once
#include <string>

#include "engine/backend.h"
#include "engine/errors.h"

namespace keras {

class UnimplementedBackend : public Backend {
 public:
  explicit UnimplementedBackend(std::string reason) : reason_(std::move(reason)) {}

  void fill(Tensor&, double) override { fail("fill"); }
  void cast(const Tensor&, Tensor&) override { fail("cast"); }
  void unary(UnaryOp op, const Tensor&, Tensor&) override { fail(unary_op_name(op)); }
  void unary_gradient(UnaryOp op, const Tensor&, const Tensor&, Tensor&) override {
    fail(str(unary_op_name(op), " gradient"));
  }
  void binary(BinaryOp op, const Tensor&, const Tensor&, Tensor&) override {
    fail(binary_op_name(op));
  }
  void where(const Tensor&, const Tensor&, const Tensor&, Tensor&) override { fail("where"); }
  void reduce(ReduceOp, const Tensor&, const std::vector<int>&, Tensor&) override {
    fail("reduce");
  }
  void arg_reduce(bool, const Tensor&, int, Tensor&) override { fail("argmax/argmin"); }
  void matmul(const Tensor&, const Tensor&, bool, bool, Tensor&) override { fail("matmul"); }
  void transpose(const Tensor&, const std::vector<int>&, Tensor&) override { fail("transpose"); }
  void copy_slice(const Tensor&, const Shape&, Tensor&) override { fail("slice"); }
  void write_slice(const Tensor&, const Shape&, Tensor&) override { fail("write_slice"); }
  void take(const Tensor&, const Tensor&, int, Tensor&) override { fail("take"); }
  void take_gradient(const Tensor&, const Tensor&, int, Tensor&) override {
    fail("take gradient");
  }
  void one_hot(const Tensor&, Tensor&) override { fail("one_hot"); }
  void softmax(const Tensor&, int, bool, Tensor&) override { fail("softmax"); }
  void softmax_gradient(const Tensor&, const Tensor&, int, bool, Tensor&) override {
    fail("softmax gradient");
  }
  void random(const RandomSpec&, const Shape&, const Shape&, Tensor&) override {
    fail("random");
  }
  void sgd_update(const SgdUpdate&, Tensor&, const Tensor&, Tensor&) override {
    fail("SGD update");
  }
  void adam_update(const AdamUpdate&, Tensor&, const Tensor&, Tensor&, Tensor&) override {
    fail("Adam update");
  }

 private:
  [[noreturn]] void fail(const std::string& kernel) const {
    throw NotImplementedError(str(kernel, " has no GPU implementation: ", reason_));
  }
  std::string reason_;
};

}  // namespace keras
