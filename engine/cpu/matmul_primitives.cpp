// oneDNN's matmul primitives behind engine/cpu/matmul_primitives.h: the per-thread cache and the
// run-time bfloat16 decision.
#include "engine/cpu/matmul_primitives.h"

#include <dnnl.hpp>

#include <cstdio>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include "engine/cpu/instruction_rates.h"
#include "engine/cpu/onednn_threads.h"
#include "engine/environment.h"
#include "engine/errors.h"

namespace keras::cpu {
namespace {

using Dims = dnnl::memory::dims;
using DataType = dnnl::memory::data_type;

// oneDNN's ISA values are nested bit sets: an ISA "has" avx512_core_bf16 when it holds all of
// its bits (avx512_core_amx does; avx2_vnni, avx512_core and earlier do not).
bool isa_has_bfloat16_dot_products(dnnl::cpu_isa isa) {
  auto bits = static_cast<unsigned>(isa);
  auto required = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (bits & required) == required;
}

bool isa_has_amx(dnnl::cpu_isa isa) {
  auto bits = static_cast<unsigned>(isa);
  auto required = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
  return (bits & required) == required;
}

std::string format_ratio(double ratio) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", ratio);
  return text;
}

DataType onednn_type(DType dtype) {
  if (dtype == float32) return DataType::f32;
  if (dtype == bfloat16) return DataType::bf16;
  throw DTypeError(str("oneDNN's matmul here takes float32 or bfloat16, got ", dtype_name(dtype)));
}

// A row-major rows x columns operand with row stride `leading`, or its transpose stored
// columns x rows.
dnnl::memory::desc operand(std::int64_t rows, std::int64_t columns, std::int64_t leading, bool transposed,
                           DataType type) {
  return dnnl::memory::desc(Dims{rows, columns}, type, transposed ? Dims{1, leading} : Dims{leading, 1});
}

using Key = std::tuple<int, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                       bool, bool>;

Key key_of(DataType type, const ProductLayout& p) {
  return Key{static_cast<int>(type), p.m, p.n, p.k, p.lda, p.ldb, p.ldc, p.transpose_a, p.transpose_b};
}

dnnl::matmul::primitive_desc describe(const dnnl::engine& engine, DataType type, const ProductLayout& p) {
  dnnl::primitive_attr attributes;
  attributes.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::memory::desc destination(Dims{p.m, p.n}, type, Dims{p.ldc, 1});
  return dnnl::matmul::primitive_desc(
      dnnl::matmul::desc(operand(p.m, p.k, p.lda, p.transpose_a, type),
                         operand(p.k, p.n, p.ldb, p.transpose_b, type), destination),
      attributes, engine);
}

bool is_reference(const dnnl::matmul::primitive_desc& description) {
  return std::string_view(description.impl_info_str()).starts_with("ref");
}

// One thread's primitives, keyed by dtype and layout (a step uses a handful), and its scratchpad.
// oneDNN fixes a primitive's OpenMP team size when it is made, so OpenMP is held to one thread
// first, on the calling thread as on the pool's.
class MatmulPrimitives {
 public:
  bool is_fast(DataType type, const ProductLayout& layout) {
    limit_openmp_to_this_thread();
    Key key = key_of(type, layout);
    auto found = fast_.find(key);
    if (found != fast_.end()) return found->second;
    bool fast = false;
    try {
      fast = !is_reference(describe(engine_, type, layout));
    } catch (const dnnl::error&) {
      fast = false;
    }
    return fast_.emplace(key, fast).first->second;
  }

  void run(DataType type, const void* a, const void* b, void* c, const ProductLayout& layout) {
    Entry& entry = entry_for(type, layout);
    dnnl::memory source(entry.source, engine_, const_cast<void*>(a));
    dnnl::memory weights(entry.weights, engine_, const_cast<void*>(b));
    dnnl::memory destination(entry.destination, engine_, c);
    dnnl::memory scratchpad(entry.scratchpad, engine_, scratch_.data());
    entry.primitive.execute(stream_, {{DNNL_ARG_SRC, source},
                                      {DNNL_ARG_WEIGHTS, weights},
                                      {DNNL_ARG_DST, destination},
                                      {DNNL_ARG_SCRATCHPAD, scratchpad}});
  }

 private:
  struct Entry {
    dnnl::memory::desc source, weights, destination, scratchpad;
    dnnl::matmul primitive;
  };

  Entry& entry_for(DataType type, const ProductLayout& layout) {
    limit_openmp_to_this_thread();
    Key key = key_of(type, layout);
    auto found = entries_.find(key);
    if (found != entries_.end()) return found->second;
    dnnl::matmul::primitive_desc description = describe(engine_, type, layout);
    dnnl::memory::desc scratchpad = description.scratchpad_desc();
    if (scratch_.size() < scratchpad.get_size()) scratch_.resize(scratchpad.get_size());
    return entries_
        .emplace(key, Entry{description.src_desc(), description.weights_desc(), description.dst_desc(),
                            scratchpad, dnnl::matmul(description)})
        .first->second;
  }

  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::map<Key, bool> fast_;
  std::map<Key, Entry> entries_;
  std::vector<unsigned char> scratch_;
};

MatmulPrimitives& matmul_primitives_of_this_thread() {
  thread_local MatmulPrimitives primitives;
  return primitives;
}

struct Decision {
  bool native = false;
  std::string description;
};

// Where the CPU has AVX512-BF16 but no AMX, the bf16 kernels are taken only when its bf16 dot
// products run at least this many times its float32 FMA rate (instruction_rates.h): a product
// on float32 copies pays a widening pass per operand, which a faster multiply must win back.
// The Xeon VM of 2026-12-07 measured 0.49x (taking the kernels made the transformer step 1.24x
// float32's time); a CPU whose dot products double the FMA rate, as their 32 multiply-adds per
// instruction allow, passes.
constexpr double kMinimumBfloat16DotSpeedup = 1.5;

const Decision& decision() {
  static const Decision decided = [] {
    Decision result;
    // Unset: decided here. 0: float32 copies. 1: oneDNN's bf16 kernels wherever it has fast
    // ones, even where they are slower (to measure or test them on such a CPU).
    std::optional<std::int64_t> setting = environment::integer("KERAS_CPU_BFLOAT16_GEMM", 0, 1);
    if (setting && *setting == 0) {
      result.description = "off (KERAS_CPU_BFLOAT16_GEMM=0); float32 copies";
      return result;
    }
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    if (!isa_has_bfloat16_dot_products(isa)) {
      result.description = "none (the CPU has no AMX or AVX512-BF16); float32 copies";
      return result;
    }
    // A typical product, with B transposed as the forward pass of a Dense layer's input
    // gradient has it.
    limit_openmp_to_this_thread();
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    std::string kernel;
    try {
      dnnl::matmul::primitive_desc probe =
          describe(engine, DataType::bf16, ProductLayout{256, 256, 256, 256, 256, 256, false, true});
      if (is_reference(probe)) {
        result.description = str("none (oneDNN offers only ", probe.impl_info_str(), "); float32 copies");
        return result;
      }
      kernel = probe.impl_info_str();
    } catch (const dnnl::error& failure) {
      result.description = str("none (oneDNN: ", failure.what(), "); float32 copies");
      return result;
    }
    if (setting) {  // 1
      result.native = true;
      result.description = str("oneDNN ", kernel, " (KERAS_CPU_BFLOAT16_GEMM=1)");
      return result;
    }
    if (isa_has_amx(isa)) {
      result.native = true;
      result.description = str("oneDNN ", kernel);
      return result;
    }
    const double speedup = bfloat16_dot_rate_over_float32_fma_rate();
    const std::string measured = str("AVX512-BF16 dot products measured at ", format_ratio(speedup),
                                     "x the float32 FMA rate");
    if (speedup >= kMinimumBfloat16DotSpeedup) {
      result.native = true;
      result.description = str("oneDNN ", kernel, " (", measured, ")");
    } else {
      result.description = str("none (", measured, ", under the ", format_ratio(kMinimumBfloat16DotSpeedup),
                               "x that pays for them; KERAS_CPU_BFLOAT16_GEMM=1 takes them anyway); float32 copies");
    }
    return result;
  }();
  return decided;
}

}  // namespace

bool cpu_multiplies_bfloat16() { return decision().native; }

bool onednn_finds_amx() { return isa_has_amx(dnnl::get_effective_cpu_isa()); }

std::string bfloat16_gemm_description() { return decision().description; }

bool matmul_primitive_is_fast(DType dtype, const ProductLayout& layout) {
  return matmul_primitives_of_this_thread().is_fast(onednn_type(dtype), layout);
}

void run_matmul_primitive(DType dtype, const void* a, const void* b, void* c, const ProductLayout& layout) {
  try {
    matmul_primitives_of_this_thread().run(onednn_type(dtype), a, b, c, layout);
  } catch (const dnnl::error& failure) {
    throw Error(str("oneDNN ", dtype_name(dtype), " matmul failed (", failure.what(), ") for M=", layout.m,
                    " N=", layout.n, " K=", layout.k, layout.transpose_a ? " with A transposed" : "",
                    layout.transpose_b ? " with B transposed" : ""));
  }
}

}  // namespace keras::cpu
