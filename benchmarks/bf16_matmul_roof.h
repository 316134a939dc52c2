// The bfloat16 roof: oneDNN's bf16 matmul (bf16 operands, float32 accumulation and result), the
// rate a step that computes in bf16 is to be judged against, as the FMA roof (fma_roof.h) is
// for float32. Only where the CPU multiplies bf16 in hardware, AMX or AVX512-BF16 as oneDNN
// finds them at run time: elsewhere oneDNN has no bf16 kernel worth timing (its reference loop),
// and there is no bf16 roof to print.
//
// Why a GEMM and not a loop of instructions as for float32: AMX's tile multiplies need tiles
// loaded and stored around them, so the useful peak is what the best bf16 GEMM reaches on
// large matrices (775 GFLOP/s on one core of the AMX Xeon at 1024^3, against 148 in float32).
#pragma once
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <dnnl.hpp>
#include <optional>
#include <string>
#include <vector>

namespace keras_benchmarks {

// "AMX" or "AVX512-BF16" where oneDNN will multiply bf16 in hardware on this CPU; none else.
inline std::optional<std::string> bf16_hardware() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto has = [&](dnnl_cpu_isa_t wanted) { return (isa & static_cast<unsigned>(wanted)) == wanted; };
  if (has(dnnl_cpu_isa_avx512_core_amx)) return "AMX";
  if (has(dnnl_cpu_isa_avx512_core_bf16)) return "AVX512-BF16";
  return std::nullopt;
}

// One (size x size) @ (size x size) bf16 product with a float32 result, ready to run on the
// calling thread (OpenMP held to that thread, as the engine holds oneDNN: engine/cpu/onednn_threads.h).
class Bf16Matmul {
 public:
  explicit Bf16Matmul(std::int64_t size)
      : size_(size),
        left_(static_cast<std::size_t>(size * size)),
        right_(static_cast<std::size_t>(size * size)),
        result_(static_cast<std::size_t>(size * size)) {
    // oneDNN sizes a primitive's OpenMP team when it is made, not when it runs: held to one
    // thread here, on the thread that makes it, as the engine holds its own.
    omp_set_num_threads(1);
    using Dims = dnnl::memory::dims;
    using Type = dnnl::memory::data_type;
    using Tag = dnnl::memory::format_tag;
    // bf16 is the upper half of a float32: values in [-1, 1) by their top 16 bits.
    for (std::size_t i = 0; i < left_.size(); ++i) {
      left_[i] = bf16_bits(static_cast<float>(i % 251) / 125.5f - 1.0f);
      right_[i] = bf16_bits(static_cast<float>(i % 241) / 120.5f - 1.0f);
    }
    const dnnl::memory::desc left(Dims{size, size}, Type::bf16, Tag::ab);
    const dnnl::memory::desc right(Dims{size, size}, Type::bf16, Tag::ab);
    const dnnl::memory::desc result(Dims{size, size}, Type::f32, Tag::ab);
    dnnl::matmul::primitive_desc description(dnnl::matmul::desc(left, right, result), engine_);
    implementation_ = description.impl_info_str();
    primitive_ = dnnl::matmul(description);
    left_memory_ = dnnl::memory(left, engine_, left_.data());
    right_memory_ = dnnl::memory(right, engine_, right_.data());
    result_memory_ = dnnl::memory(result, engine_, result_.data());
  }

  void run() {
    omp_set_num_threads(1);
    primitive_.execute(stream_, {{DNNL_ARG_SRC, left_memory_}, {DNNL_ARG_WEIGHTS, right_memory_},
                                 {DNNL_ARG_DST, result_memory_}});
    stream_.wait();
  }

  double flops() const { return 2.0 * static_cast<double>(size_) * static_cast<double>(size_) * static_cast<double>(size_); }
  // oneDNN's name for the kernel it chose ("brg:avx512_core_amx"), so a result says what ran.
  const std::string& implementation() const { return implementation_; }
  float first_result() const { return result_[0]; }

 private:
  static std::uint16_t bf16_bits(float value) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    return static_cast<std::uint16_t>(bits >> 16);
  }

  std::int64_t size_;
  std::vector<std::uint16_t> left_, right_;
  std::vector<float> result_;
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  dnnl::matmul primitive_;
  dnnl::memory left_memory_, right_memory_, result_memory_;
  std::string implementation_;
};

}  // namespace keras_benchmarks
