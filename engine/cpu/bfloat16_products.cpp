// oneDNN's bf16 matmul behind engine/cpu/bfloat16_products.h: the run-time decision and the
// per-thread primitives.
#include "engine/cpu/bfloat16_products.h"

#include <dnnl.hpp>

#include <map>
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include "engine/cpu/onednn_threads.h"
#include "engine/environment.h"
#include "engine/errors.h"

namespace keras::cpu {
namespace {

using Dims = dnnl::memory::dims;
constexpr auto kBFloat16 = dnnl::memory::data_type::bf16;

// oneDNN's ISA values are nested bit sets: an ISA "has" avx512_core_bf16 when it holds all of
// its bits (avx512_core_amx does; avx2_vnni, avx512_core and earlier do not).
bool isa_has_bfloat16_dot_products(dnnl::cpu_isa isa) {
  auto bits = static_cast<unsigned>(isa);
  auto required = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (bits & required) == required;
}

// A row-major m x k operand with row stride `leading`, or its transpose stored k x m.
dnnl::memory::desc operand(std::int64_t rows, std::int64_t columns, std::int64_t leading, bool transposed) {
  return dnnl::memory::desc(Dims{rows, columns}, kBFloat16, transposed ? Dims{1, leading} : Dims{leading, 1});
}

using ProductKey = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                              std::int64_t, bool, bool>;

dnnl::matmul::primitive_desc describe(const dnnl::engine& engine, const ProductKey& key) {
  auto [m, n, k, lda, ldb, ldc, transpose_a, transpose_b] = key;
  dnnl::primitive_attr attributes;
  attributes.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::memory::desc destination(Dims{m, n}, kBFloat16, Dims{ldc, 1});
  return dnnl::matmul::primitive_desc(
      dnnl::matmul::desc(operand(m, k, lda, transpose_a), operand(k, n, ldb, transpose_b), destination),
      attributes, engine);
}

bool is_reference(const dnnl::matmul::primitive_desc& description) {
  return std::string_view(description.impl_info_str()).starts_with("ref");
}

// Each thread keeps its primitives, keyed by the part's shape, strides and transposes (a step
// uses a handful), and its own scratchpad: no lock on the hot path. oneDNN fixes a primitive's
// OpenMP team size when it is created, so OpenMP is held to one thread before any is
// (engine/cpu/onednn_threads.h), on the calling thread as on the pool's.
class BFloat16Products {
 public:
  bool is_fast(const ProductKey& key) {
    limit_openmp_to_this_thread();
    auto found = fast_.find(key);
    if (found != fast_.end()) return found->second;
    bool fast = false;
    try {
      fast = !is_reference(describe(engine_, key));
    } catch (const dnnl::error&) {
      fast = false;
    }
    return fast_.emplace(key, fast).first->second;
  }

  void run(const ProductKey& key, const BFloat16* a, const BFloat16* b, BFloat16* c) {
    Entry& entry = entry_for(key);
    dnnl::memory source(entry.source, engine_, const_cast<BFloat16*>(a));
    dnnl::memory weights(entry.weights, engine_, const_cast<BFloat16*>(b));
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

  Entry& entry_for(const ProductKey& key) {
    limit_openmp_to_this_thread();
    auto found = entries_.find(key);
    if (found != entries_.end()) return found->second;
    dnnl::matmul::primitive_desc description = describe(engine_, key);
    dnnl::memory::desc scratchpad = description.scratchpad_desc();
    if (scratch_.size() < scratchpad.get_size()) scratch_.resize(scratchpad.get_size());
    return entries_
        .emplace(key, Entry{description.src_desc(), description.weights_desc(), description.dst_desc(),
                            scratchpad, dnnl::matmul(description)})
        .first->second;
  }

  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::map<ProductKey, bool> fast_;
  std::map<ProductKey, Entry> entries_;
  std::vector<unsigned char> scratch_;
};

BFloat16Products& products_of_this_thread() {
  thread_local BFloat16Products products;
  return products;
}

struct Decision {
  bool native = false;
  std::string description;
};

const Decision& decision() {
  static const Decision decided = [] {
    Decision result;
    std::optional<std::int64_t> setting = environment::integer("KERAS_CPU_BFLOAT16_GEMM", 0, 1);
    if (setting && *setting == 0) {
      result.description = "off (KERAS_CPU_BFLOAT16_GEMM=0); float32 copies";
      return result;
    }
    if (!isa_has_bfloat16_dot_products(dnnl::get_effective_cpu_isa())) {
      result.description = "none (the CPU has no AMX or AVX512-BF16); float32 copies";
      return result;
    }
    // The shape of a typical product, with the transposes the backward pass uses.
    limit_openmp_to_this_thread();
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    try {
      dnnl::matmul::primitive_desc probe = describe(engine, ProductKey{256, 256, 256, 256, 256, 256, false, true});
      if (is_reference(probe)) {
        result.description = str("none (oneDNN offers only ", probe.impl_info_str(), "); float32 copies");
        return result;
      }
      result.native = true;
      result.description = str("oneDNN ", probe.impl_info_str());
    } catch (const dnnl::error& failure) {
      result.description = str("none (oneDNN: ", failure.what(), "); float32 copies");
    }
    return result;
  }();
  return decided;
}

}  // namespace

bool cpu_multiplies_bfloat16() { return decision().native; }

std::string bfloat16_gemm_description() { return decision().description; }

bool bfloat16_product_is_fast(std::int64_t m, std::int64_t n, std::int64_t k, bool transpose_a,
                              bool transpose_b) {
  std::int64_t lda = transpose_a ? m : k, ldb = transpose_b ? k : n;
  return products_of_this_thread().is_fast(ProductKey{m, n, k, lda, ldb, n, transpose_a, transpose_b});
}

void multiply_bfloat16(const BFloat16* a, const BFloat16* b, BFloat16* c, std::int64_t m,
                       std::int64_t n, std::int64_t k, std::int64_t lda, std::int64_t ldb,
                       std::int64_t ldc, bool transpose_a, bool transpose_b) {
  try {
    products_of_this_thread().run(ProductKey{m, n, k, lda, ldb, ldc, transpose_a, transpose_b}, a, b, c);
  } catch (const dnnl::error& failure) {
    throw Error(str("oneDNN bf16 matmul failed (", failure.what(), ") for M=", m, " N=", n, " K=", k,
                    transpose_a ? " with A transposed" : "", transpose_b ? " with B transposed" : ""));
  }
}

}  // namespace keras::cpu
