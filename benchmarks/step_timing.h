// How the step benchmarks (data_parallel_step, model_parallel_step, transformer_step,
// convnet_step) time a training step, written once: every process starts the step together
// (a barrier) and the slowest process's time is the step's, as in a synchronised step; the
// median over steps after warm-up is reported. And the FMA roof of the engine's threads, which
// their model-FLOPs utilisation is measured against in the same run.
#pragma once
#include <algorithm>
#include <chrono>
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

// GFLOP/s of the FMA chains on every thread of the engine's pool at once (median of 5); 0
// where there is no x86 FMA.
inline double fma_roof_gflops() {
#if defined(__x86_64__)
  constexpr std::int64_t kRounds = 1 << 22;
  const int threads = keras::num_threads();
  std::vector<double> rates;
  for (int repeat = 0; repeat < 5; ++repeat) {
    auto begin = std::chrono::steady_clock::now();
    volatile double sink = 0;
    keras::parallel_for(threads, 1, [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t part = first; part < last; ++part) sink = sink + fma_chains(kRounds);
    });
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    rates.push_back(kFmaChainFlops * static_cast<double>(kRounds) * threads / seconds / 1e9);
  }
  return median(rates);
#else
  return 0;
#endif
}

}  // namespace keras_benchmarks
