// Binds the CPU kernels to the Backend interface, and maps devices to backends.
#include <atomic>

#include "engine/cpu/kernels.h"
#include "engine/float32_compute.h"
#include "engine/gpu_provider.h"

namespace keras {
namespace {

class CpuBackend final : public Backend {
 public:
// Half-precision arguments reach the kernels as float32 (engine/float32_compute.h).
#define KERAS_UNPACK_ARGUMENTS(...) __VA_ARGS__
#define KERAS_FORWARD_TO_CPU(name, parameters, arguments)                                \
  void name parameters override {                                                        \
    float32_compute::call_in_float32(                                                    \
        *this, #name, &float32_compute::is_native_on_cpu,                                \
        [](auto&... wide) { cpu::name(wide...); },                                        \
        KERAS_UNPACK_ARGUMENTS arguments);                                               \
  }
  KERAS_KERNELS(KERAS_FORWARD_TO_CPU)
#undef KERAS_FORWARD_TO_CPU
#undef KERAS_UNPACK_ARGUMENTS
};

std::atomic<Backend*> cpu_override{nullptr};

}  // namespace

ScopedCpuBackendOverride::ScopedCpuBackendOverride(Backend& backend)
    : previous_(cpu_override.exchange(&backend)) {}
ScopedCpuBackendOverride::~ScopedCpuBackendOverride() { cpu_override.store(previous_); }

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

Backend& backend_for(Device device) {
  if (device.is_cpu()) {
    Backend* override = cpu_override.load(std::memory_order_relaxed);
    return override != nullptr ? *override : cpu_backend();
  }
  return gpu_provider().backend();
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
