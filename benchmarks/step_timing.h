// How the step benchmarks (data_parallel_step, model_parallel_step, transformer_step,
// convnet_step) time a training step, written once: every process starts the step together
// (a barrier) and the slowest process's time is the step's, as in a synchronised step; the
// median over steps after warm-up is reported. And the float32 FMA roof of the engine's threads
// (the widest vector FMA the CPU has), which their model-FLOPs utilisation is measured against
// in the same run.
#pragma once
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "benchmarks/fma_roof.h"
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

}  // namespace keras_benchmarks
