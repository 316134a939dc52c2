// Runs engine/cuda/'s kernel bodies on host memory, one index at a time, so that every GPU
// kernel's index arithmetic, edge cases and dispatch are checked by the op table on machines
// without a GPU. What this cannot check is what only a GPU has: launches, streams, device
// memory and cuBLAS itself (gemm here is a plain loop with cuBLAS' column-major meaning, which
// checks the row-major-to-column-major mapping of engine/cuda/matmul.h, and that a 16-bit
// GEMM's result is rounded once, from a wide sum).
//
// Indices run from last to first: a kernel body that depended on running in order (and so would
// race on a GPU) gives wrong answers here instead of passing by luck.
#pragma once
#include <cstring>
#include <type_traits>

#include "engine/cuda/kernel_backend.h"

namespace keras::testing {

class HostLauncher {
 public:
  explicit HostLauncher(Device device) : device_(device) {}

  template <class Body>
  void for_each(std::int64_t count, const Body& body) {
    static_assert(std::is_trivially_copyable_v<Body>, "kernel bodies are copied to the GPU");
    for (std::int64_t i = count - 1; i >= 0; --i) body(i);
  }
  // One slot for the emulated device, as a GPU has one: deferred reports outlive the launch.
  gpu_kernels::ErrorReport* error_report() { return &device_report(); }
  void check_errors() {
    gpu_kernels::ErrorReport report = device_report();
    device_report() = {};
    gpu_kernels::throw_reported_error(report);
  }
  void copy(void* destination, const void* source, std::size_t bytes) {
    std::memmove(destination, source, bytes);
  }
  template <typename T>
  void gemm(const gpu_kernels::GemmCall& call, const T* a, const T* b, T* c) {
    for (std::int64_t p = 0; p < call.batch; ++p) {
      const T* pa = a + p * call.stride_a;
      const T* pb = b + p * call.stride_b;
      T* pc = c + p * call.stride_c;
      for (std::int64_t j = 0; j < call.n; ++j) {
        for (std::int64_t i = 0; i < call.m; ++i) {
          double total = 0;
          for (std::int64_t l = 0; l < call.k; ++l) {
            T left = call.transpose_a ? pa[l + i * call.lda] : pa[i + l * call.lda];
            T right = call.transpose_b ? pb[j + l * call.ldb] : pb[l + j * call.ldb];
            total += wide(left) * wide(right);
          }
          T& element = pc[i + j * call.ldc];
          element = rounded<T>(call.accumulate ? wide(element) + total : total);
        }
      }
    }
  }
  Device device() const { return device_; }

 private:
  // 16-bit elements: cuBLAS' CUBLAS_COMPUTE_32F widens them and accumulates in float32 (reduced-
  // precision reductions are disallowed: gpu_runtime.cu), rounding the result once; here the
  // sum is kept in double and rounded through float32, so the two agree to the result's
  // rounding, which is what the op table's 16-bit tolerance allows for.
  template <typename T>
  static double wide(T value) {
    if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>) {
      return static_cast<double>(static_cast<float>(value));
    } else {
      return static_cast<double>(value);
    }
  }
  template <typename T>
  static T rounded(double value) {
    if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>) {
      return T(static_cast<float>(value));
    } else {
      return static_cast<T>(value);
    }
  }

  static gpu_kernels::ErrorReport& device_report() {
    static gpu_kernels::ErrorReport report;
    return report;
  }
  Device device_;
};

}  // namespace keras::testing
