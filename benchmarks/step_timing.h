// How the step benchmarks (data_parallel_step, model_parallel_step, transformer_step,
// convnet_step) time a training step, written once: every process starts the step together
// (a barrier) and the slowest process's time is the step's, as in a synchronised step; the
// median over steps after warm-up is reported. And the roof their model-FLOPs utilisation is
// measured against in the same run: the float32 FMA roof of the engine's threads (the widest
// vector FMA the CPU has), or, for a step whose products run on the CPU's bf16 instructions,
// the bf16 matmul roof (bf16_matmul_roof.h).
#pragma once
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/bf16_matmul_roof.h"
#include "benchmarks/fma_roof.h"
#include "engine/cpu/matmul_primitives.h"
#include "keras.h"

namespace keras_benchmarks {

// One train_on_batch, timed on the slowest process.
inline double slowest_step_seconds(keras::Model& model, const keras::Tensor& x, const keras::Tensor& y) {
  namespace kd = keras::distribution;
  kd::world().barrier();
  auto begin = std::chrono::steady_clock::now();
  model.train_on_batch(x, y);
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  kd::world().all_reduce(&elapsed, 1, keras::float64, kd::ReduceOperation::max);
  return elapsed;
}

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The median of `steps` slowest-process steps after `warmup` untimed ones.
inline double median_step_seconds(keras::Model& model, const keras::Tensor& x, const keras::Tensor& y,
                                  int warmup, int steps) {
  for (int i = 0; i < warmup; ++i) model.train_on_batch(x, y);
  std::vector<double> seconds;
  for (int i = 0; i < steps; ++i) seconds.push_back(slowest_step_seconds(model, x, y));
  return median(seconds);
}

// The float32 roof of the engine's threads: GFLOP/s of the FMA chains (fma_roof.h) on every
// thread of the pool at once, median of 5, at each vector width the CPU has; the fastest width
// is the roof and names it ("AVX-512 FMA"). gflops 0 where there is no x86 FMA.
struct FmaRoof {
  double gflops = 0;
  std::string name = "no FMA";
};

inline FmaRoof fma_roof() {
  constexpr std::int64_t kRounds = 1 << 22;
  const int threads = keras::num_threads();
  FmaRoof roof;
  for (const FmaWidth& width : fma_widths()) {
    std::vector<double> rates;
    for (int repeat = 0; repeat < 5; ++repeat) {
      auto begin = std::chrono::steady_clock::now();
      volatile double sink = 0;
      keras::parallel_for(threads, 1, [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t part = first; part < last; ++part) sink = sink + width.chains(kRounds);
      });
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
      rates.push_back(width.flops_per_round * static_cast<double>(kRounds) * threads / seconds / 1e9);
    }
    const double rate = median(rates);
    if (rate > roof.gflops) roof = {rate, std::string(width.name) + " FMA"};
  }
  return roof;
}

// The roof of the dtype a step's products compute in. Under a bfloat16 compute dtype, where the
// engine multiplies bf16 on the CPU's bf16 instructions (engine/cpu/matmul_primitives.h): the
// rate of oneDNN's 1024^3 bf16 matmul on every thread at once, median of 5, named after
// oneDNN's kernel. Anywhere else the products run in float32 (float32 copies of 16-bit
// operands included), and the roof is the FMA roof.
inline FmaRoof compute_roof(keras::DType compute_dtype) {
  if (compute_dtype != keras::bfloat16 || !keras::cpu::cpu_multiplies_bfloat16()) return fma_roof();
  constexpr std::int64_t kSize = 1024;
  const int threads = keras::num_threads();
  std::vector<std::unique_ptr<Bf16Matmul>> products;
  for (int thread = 0; thread < threads; ++thread) products.push_back(std::make_unique<Bf16Matmul>(kSize));
  std::vector<double> rates;
  for (int repeat = 0; repeat < 6; ++repeat) {  // the first is a warm-up
    auto begin = std::chrono::steady_clock::now();
    keras::parallel_for(threads, 1, [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t part = first; part < last; ++part) products[static_cast<std::size_t>(part)]->run();
    });
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    if (repeat > 0) rates.push_back(products[0]->flops() * threads / seconds / 1e9);
  }
  return {median(rates), "bf16 matmul " + products[0]->implementation()};
}

}  // namespace keras_benchmarks
