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

#define KERAS_REFUSE_KERNEL(name, parameters, arguments) \
  void name parameters override { fail(#name, KERAS_UNPACK arguments); }
#define KERAS_UNPACK(...) __VA_ARGS__
  KERAS_KERNELS(KERAS_REFUSE_KERNEL)
#undef KERAS_UNPACK
#undef KERAS_REFUSE_KERNEL

 private:
  // The unary and binary kernels are named by their op ("exp has no GPU implementation").
  template <typename... Arguments>
  [[noreturn]] void fail(const char* kernel, UnaryOp op, const Arguments&...) const {
    refuse(str(unary_op_name(op), std::string(kernel) == "unary" ? "" : " gradient"));
  }
  template <typename... Arguments>
  [[noreturn]] void fail(const char*, BinaryOp op, const Arguments&...) const {
    refuse(binary_op_name(op));
  }
  template <typename First, typename... Arguments>
  [[noreturn]] void fail(const char* kernel, const First&, const Arguments&...) const {
    refuse(kernel);
  }
  [[noreturn]] void refuse(const std::string& kernel) const {
    throw NotImplementedError(str(kernel, " has no GPU implementation: ", reason_));
  }
  std::string reason_;
};

}  // namespace keras
