// The kernels an op may call, listed once in engine/kernel_list.h. Each device kind implements
// all of them once: engine/cpu/ on Eigen and oneDNN, engine/cuda/ for GPUs. Ops (engine/ops/) allocate outputs, check arguments
// and attach gradient rules; kernels only compute, and may assume their arguments are valid
// (same device, matching dtypes, output already allocated with the right shape).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/index_check.h"
#include "engine/kernel_list.h"
#include "engine/random.h"
#include "engine/tensor.h"
#include "engine/unary_ops.h"
#include "engine/window_geometry.h"

namespace keras {

enum class BinaryOp {
  add, subtract, multiply, divide, maximum, minimum, power,
  equal, not_equal, less, less_equal, greater, greater_equal, logical_and, logical_or
};
enum class ReduceOp { sum, max, min };
enum class PoolOp { max, average };

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

struct RmspropUpdate {
  double learning_rate = 0.001;
  double rho = 0.9;
  double momentum = 0.0;   // > 0: the momentum slot is used
  double epsilon = 1e-7;
  bool centered = false;   // the average-gradient slot is used
  double weight_decay = 0.0;
};

struct AdagradUpdate {
  double learning_rate = 0.001;
  double epsilon = 1e-7;
  double weight_decay = 0.0;
};

// One virtual per kernel of engine/kernel_list.h (its contracts are there).
class Backend {
 public:
  virtual ~Backend() = default;
#define KERAS_DECLARE_KERNEL(name, parameters, arguments) virtual void name parameters = 0;
  KERAS_KERNELS(KERAS_DECLARE_KERNEL)
#undef KERAS_DECLARE_KERNEL
  // Throws what `device`'s kernels found and deferred (engine/index_check.h). The CPU throws at
  // once and has nothing deferred; a GPU's reads to the host call this themselves.
  virtual void raise_deferred_errors(Device /*device*/) {}
};

Backend& backend_for(Device device);
Backend& cpu_backend();
// This build's GPU kernels (engine/cuda/ or engine/no_gpu/). Ops reach the GPU's kernels through
// backend_for, which asks whatever serves gpu devices now (engine/gpu_provider.h).
Backend& gpu_backend();

// While it lives, backend_for(cpu) gives `backend` instead of the CPU kernels; memory stays host
// memory. For other kernels on host memory (the GPU kernels' bodies run on the host, in
// tests/gpu_emulation/), or a backend that wraps cpu_backend() to trace or count its calls. Not
// for concurrent use with other overrides.
class ScopedCpuBackendOverride {
 public:
  explicit ScopedCpuBackendOverride(Backend& backend);
  ~ScopedCpuBackendOverride();
  ScopedCpuBackendOverride(const ScopedCpuBackendOverride&) = delete;
  ScopedCpuBackendOverride& operator=(const ScopedCpuBackendOverride&) = delete;

 private:
  Backend* previous_;
};

const char* binary_op_name(BinaryOp op);

}  // namespace keras
