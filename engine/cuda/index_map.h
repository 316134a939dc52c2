// What the CUDA kernels share: the index map from a flat output index to each operand's element
// (a StridedPlan in fixed-size arrays, so it can be passed to a kernel by value), and the slot a
// kernel writes an error into (device code cannot throw; the host reads the slot and throws the
// CPU backend's message).
//
// Everything under engine/cuda/ except the *.cu files is plain C++ that g++ compiles as well:
// tests/gpu_emulation/ runs the same kernel bodies on host memory, one index at a time, so the
// op table checks the GPU kernels' index arithmetic and edge cases on machines without a GPU.
#pragma once
#include <cstdint>

#include "engine/errors.h"
#include "engine/host_device.h"
#include "engine/index_check.h"
#include "engine/strided_plan.h"

namespace keras::gpu_kernels {

// Tensors of more axes than this (after merging contiguous axes) are refused on the GPU.
inline constexpr int kMaxAxes = 8;

template <int N>
struct IndexMap {
  int rank = 0;
  std::int64_t shape[kMaxAxes] = {};
  std::int64_t strides[N][kMaxAxes] = {};

  // offsets[k] = operand k's element for output element `flat` (row-major over `shape`).
  KERAS_HOST_DEVICE void offsets(std::int64_t flat, std::int64_t (&offsets)[N]) const {
    for (int k = 0; k < N; ++k) offsets[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      std::int64_t index = flat % shape[d];
      flat /= shape[d];
      for (int k = 0; k < N; ++k) offsets[k] += index * strides[k][d];
    }
  }
};

template <int N>
IndexMap<N> index_map(const StridedPlan<N>& plan, const char* kernel) {
  if (plan.shape.size() > static_cast<std::size_t>(kMaxAxes)) {
    throw NotImplementedError(str(kernel, " on the GPU handles at most ", kMaxAxes,
                                  " axes that are not contiguous; this call has ",
                                  plan.shape.size(), " (shape ", shape_to_string(plan.shape),
                                  ")"));
  }
  IndexMap<N> map;
  map.rank = static_cast<int>(plan.shape.size());
  for (int d = 0; d < map.rank; ++d) {
    map.shape[d] = plan.shape[d];
    for (int k = 0; k < N; ++k) map.strides[k][d] = plan.strides[k][d];
  }
  return map;
}

// Errors a kernel can meet in the data (the arguments were checked before the launch).
// index_out_of_range is deferred (engine/index_check.h): first is the index, second the check's
// message.
enum class KernelError : int {
  none = 0,
  integer_division_by_zero = 1,
  negative_integer_power = 2,
  index_out_of_range = 3
};

struct ErrorReport {
  int code = 0;  // a KernelError; the first one reported wins
  long long first = 0, second = 0;  // the operands involved
};

KERAS_HOST_DEVICE inline void report_error(ErrorReport* report, KernelError error,
                                           long long first, long long second) {
#if defined(__CUDA_ARCH__)
  if (atomicCAS(&report->code, 0, static_cast<int>(error)) == 0) {
    report->first = first;
    report->second = second;
  }
#else
  if (report->code == 0) {
    *report = {static_cast<int>(error), first, second};
  }
#endif
}

// Throws the CPU backend's error for a report taken from the device (no-op when none).
inline void throw_reported_error(const ErrorReport& report) {
  switch (static_cast<KernelError>(report.code)) {
    case KernelError::none: return;
    case KernelError::integer_division_by_zero:
      throw ValueError(str("divide: integer division by zero (", report.first, " / 0); NumPy ",
                           "would give 0 with a warning, we refuse"));
    case KernelError::index_out_of_range:
      throw ValueError(index_error_message(static_cast<int>(report.second), report.first) +
                       " (found by a check on the GPU, reported at the next read from it)");
    case KernelError::negative_integer_power:
      throw ValueError(str("power: integers to negative integer powers are not allowed (got ",
                           report.first, " ** ", report.second, "); cast to a floating dtype ",
                           "first, as in NumPy"));
  }
  throw Error(str("internal error: a GPU kernel reported the unknown error code ", report.code));
}

}  // namespace keras::gpu_kernels
