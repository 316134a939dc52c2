// Throughput of keras::ops::matmul in float32 on CPU, in GFLOP/s, for the three forward
// products of an MLP 784-1024-1024-10 at batch 128 and for square matrices of 256, 512 and 1024;
// and BM_TrainingStepProducts: the eight products of one training step of that MLP (forward,
// input gradients, kernel gradients, with the backward pass's transpositions) back to back,
// the GEMM share of training_step_benchmark; BM_TrainingStepProduct/i, each of the eight alone;
// and BM_FmaRoof/<width>, the FMA peak of the engine's threads at each vector width the CPU has,
// against which the products are judged; BM_Bf16DotRoof/AVX512-BF16, the same chains of the bf16
// dot product; and BM_Bf16MatmulRoof/<AMX|AVX512-BF16>/<size>, oneDNN's bf16 GEMM where the CPU
// multiplies bf16 in hardware (the last two not registered elsewhere).
// The MLP shapes are the ones training_step_benchmark spends most of its time in; the square ones
// show what the kernel reaches when no dimension is small.
//   matmul_benchmark [Google Benchmark flags]; KERAS_NUM_THREADS sets the engine's threads.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/thread_pool.h"
#include "benchmarks/bf16_matmul_roof.h"
#include "benchmarks/fma_roof.h"
#include "keras.h"

namespace {

keras::Tensor random_matrix(std::int64_t rows, std::int64_t columns, std::uint64_t seed) {
  keras::RandomSpec spec{.distribution = keras::RandomDistribution::uniform,
                         .a = -1.0, .b = 1.0, .seed = seed};
  return keras::ops::random(spec, {rows, columns});
}

// Arguments: m, k, n for (m x k) @ (k x n).
void BM_Matmul(benchmark::State& state) {
  const std::int64_t m = state.range(0);
  const std::int64_t k = state.range(1);
  const std::int64_t n = state.range(2);
  keras::Tensor a = random_matrix(m, k, 1);
  keras::Tensor b = random_matrix(k, n, 2);
  // The first call pays for one-time set-up (pool start, allocator growth), not the kernel.
  benchmark::DoNotOptimize(keras::ops::matmul(a, b));
  for (auto _ : state) {
    keras::Tensor product = keras::ops::matmul(a, b);
    benchmark::DoNotOptimize(product.raw_data());
    benchmark::ClobberMemory();
  }
  const double flops_per_product = 2.0 * static_cast<double>(m) * static_cast<double>(n) *
                                   static_cast<double>(k);
  // kIsIterationInvariantRate multiplies by the iterations and divides by the time; the 1e9
  // makes the printed number GFLOP/s rather than FLOP/s.
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_product / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel("threads=" + std::to_string(keras::num_threads()));
}

// The products of the MLP's forward pass at batch 128, then square sizes. Wall-clock time,
// because the engine's pool threads do part of the work and CPU time counts only the caller.
BENCHMARK(BM_Matmul)
    ->ArgNames({"m", "k", "n"})
    ->Args({128, 784, 1024})
    ->Args({128, 1024, 1024})
    ->Args({128, 1024, 10})
    ->Args({256, 256, 256})
    ->Args({512, 512, 512})
    ->Args({1024, 1024, 1024})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Every thread of the engine's pool runs the chains at once: the roof for num_threads(), one
// benchmark for each vector width the CPU has (BM_FmaRoof/AVX2, BM_FmaRoof/AVX-512).
void BM_FmaRoof(benchmark::State& state, keras_benchmarks::FmaWidth width) {
  constexpr std::int64_t kRounds = 1 << 20;
  const int threads = keras::num_threads();
  for (auto _ : state) {
    keras::parallel_for(threads, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t part = begin; part < end; ++part) benchmark::DoNotOptimize(width.chains(kRounds));
    });
  }
  const double flops = width.flops_per_round * static_cast<double>(kRounds) * threads;
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel("threads=" + std::to_string(threads));
}
const bool kFmaRoofsRegistered = [] {
  for (const keras_benchmarks::FmaWidth& width : keras_benchmarks::fma_widths()) {
    benchmark::RegisterBenchmark((std::string("BM_FmaRoof/") + width.name).c_str(), BM_FmaRoof, width)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
#if defined(__x86_64__)
  // The bf16 dot product's own rate beside them, where the CPU has it: what the engine compares
  // with the AVX-512 FMA rate to choose a route for bf16 products (engine/cpu/matmul_primitives.h).
  if (__builtin_cpu_supports("avx512bf16")) {
    benchmark::RegisterBenchmark("BM_Bf16DotRoof/AVX512-BF16", BM_FmaRoof,
                                 keras_benchmarks::FmaWidth{"AVX512-BF16 dot", keras::cpu::kBfloat16DotFlopsPerRound,
                                                            keras::cpu::bfloat16_dot_chains_avx512})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
#endif
  return true;
}();

// The bf16 roof (bf16_matmul_roof.h): every thread of the pool runs its own bf16 product at once;
// registered only where the CPU multiplies bf16 in hardware (BM_Bf16MatmulRoof/AMX/2048).
void BM_Bf16MatmulRoof(benchmark::State& state, std::int64_t size) {
  const int threads = keras::num_threads();
  std::vector<std::unique_ptr<keras_benchmarks::Bf16Matmul>> products;
  try {
    for (int thread = 0; thread < threads; ++thread) products.push_back(std::make_unique<keras_benchmarks::Bf16Matmul>(size));
  } catch (const dnnl::error& failure) {
    state.SkipWithError((std::string("oneDNN made no bf16 matmul: ") + failure.what()).c_str());
    return;
  }
  for (auto _ : state) {
    keras::parallel_for(threads, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t part = begin; part < end; ++part) products[static_cast<std::size_t>(part)]->run();
    });
  }
  benchmark::DoNotOptimize(products[0]->first_result());
  state.counters["GFLOP/s"] = benchmark::Counter(products[0]->flops() * threads / 1e9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel("threads=" + std::to_string(threads) + " " + products[0]->implementation());
}
const bool kBf16RoofsRegistered = [] {
  if (const auto hardware = keras_benchmarks::bf16_hardware()) {
    for (std::int64_t size : {1024, 2048}) {
      benchmark::RegisterBenchmark(("BM_Bf16MatmulRoof/" + *hardware + "/" + std::to_string(size)).c_str(),
                                   BM_Bf16MatmulRoof, size)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  return true;
}();

// The products as the backward pass issues them: (m, n, k, transpose_a, transpose_b).
struct Product { std::int64_t m, n, k; bool transpose_a, transpose_b; };
constexpr Product kStepProducts[] = {
    {128, 1024, 784, false, false},  {128, 1024, 1024, false, false}, {128, 10, 1024, false, false},
    {128, 1024, 10, false, true},    {128, 1024, 1024, false, true},  {1024, 10, 128, true, false},
    {1024, 1024, 128, true, false},  {784, 1024, 128, true, false}};

// All eight one after the other, as a step runs them (each one's inputs colder than in a loop
// over one product).
void BM_TrainingStepProducts(benchmark::State& state) {
  const auto& products = kStepProducts;
  std::vector<keras::Tensor> left, right, out;
  double flops = 0;
  for (const Product& p : products) {
    left.push_back(random_matrix(p.transpose_a ? p.k : p.m, p.transpose_a ? p.m : p.k, 1));
    right.push_back(random_matrix(p.transpose_b ? p.n : p.k, p.transpose_b ? p.k : p.n, 2));
    out.push_back(keras::Tensor::empty({p.m, p.n}));
    flops += 2.0 * static_cast<double>(p.m * p.n * p.k);
  }
  for (auto _ : state) {
    for (std::size_t i = 0; i < out.size(); ++i) {
      keras::cpu::matmul(left[i], right[i], products[i].transpose_a, products[i].transpose_b, out[i]);
    }
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel("threads=" + std::to_string(keras::num_threads()));
}
BENCHMARK(BM_TrainingStepProducts)->UseRealTime()->Unit(benchmark::kMillisecond);

// One of the eight alone (argument: its index in kStepProducts), to see which falls short of
// the FMA roof (the fastest BM_FmaRoof).
void BM_TrainingStepProduct(benchmark::State& state) {
  const Product& p = kStepProducts[state.range(0)];
  keras::Tensor left = random_matrix(p.transpose_a ? p.k : p.m, p.transpose_a ? p.m : p.k, 1);
  keras::Tensor right = random_matrix(p.transpose_b ? p.n : p.k, p.transpose_b ? p.k : p.n, 2);
  keras::Tensor out = keras::Tensor::empty({p.m, p.n});
  for (auto _ : state) {
    keras::cpu::matmul(left, right, p.transpose_a, p.transpose_b, out);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(p.m * p.n * p.k) / 1e9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(keras::str(p.m, "x", p.n, "x", p.k, p.transpose_a ? " A^T" : "", p.transpose_b ? " B^T" : "",
                            " threads=", keras::num_threads()));
}
BENCHMARK(BM_TrainingStepProduct)->DenseRange(0, 7)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
