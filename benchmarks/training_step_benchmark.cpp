// Time of one full training step of an MLP 784-1024-1024-10 (ReLU), on the CPU and on gpu:0: forward pass, sparse
// categorical cross-entropy from logits, backward pass and Adam update, all through
// Model::train_on_batch, at batch 32, 128 and 512. compare_training_step.py runs this program
// and the same step in PyTorch one after the other and prints the ratio.
//   training_step_benchmark [Google Benchmark flags]; KERAS_NUM_THREADS sets the threads.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "engine/gpu_runtime.h"
#include "keras.h"

namespace {

constexpr std::int64_t kInputFeatures = 784;
constexpr std::int64_t kClasses = 10;

keras::Tensor random_inputs(std::int64_t batch_size) {
  keras::RandomSpec spec{.distribution = keras::RandomDistribution::uniform,
                         .a = 0.0, .b = 1.0, .seed = 7};
  return keras::ops::random(spec, {batch_size, kInputFeatures});
}

keras::Tensor random_labels(std::int64_t batch_size) {
  std::mt19937_64 generator(11);
  std::uniform_int_distribution<std::int64_t> label(0, kClasses - 1);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(batch_size));
  for (auto& value : labels) value = label(generator);
  return keras::Tensor::from_vector(labels, {batch_size});
}

// Arguments: the batch size, and 1 to train on gpu:0 (every tensor there) instead of the CPU.
void BM_TrainingStep(benchmark::State& state) {
  const std::int64_t batch_size = state.range(0);
  const bool on_gpu = state.range(1) == 1;
  if (on_gpu && keras::gpu::device_count() == 0) {
    state.SkipWithError(("no GPU: " + keras::gpu::description()).c_str());
    return;
  }
  const keras::Device device = on_gpu ? keras::Device::gpu(0) : keras::Device::cpu();
  keras::DefaultDeviceScope on_device(device);
  keras::set_random_seed(42);
  keras::Sequential model({keras::layers::Dense(1024, "relu"), keras::layers::Dense(1024, "relu"),
                           keras::layers::Dense(kClasses)});
  model.compile(keras::optimizers::Adam(1e-3),
                keras::losses::SparseCategoricalCrossentropy(/*from_logits=*/true), {});
  keras::Tensor inputs = random_inputs(batch_size).to(device);
  keras::Tensor labels = random_labels(batch_size).to(device);

  // The first step builds the layers and creates Adam's slots; that cost is not the step's.
  // Engine errors become a skipped benchmark with the message, rather than std::terminate.
  double first_loss = 0.0;
  double loss = 0.0;
  try {
    first_loss = model.train_on_batch(inputs, labels);
    loss = model.train_on_batch(inputs, labels);  // the free lists now hold a step's blocks
    keras::AllocatorStats before = keras::allocator_stats(device);
    for (auto _ : state) {
      loss = model.train_on_batch(inputs, labels);
      benchmark::DoNotOptimize(loss);
    }
    keras::AllocatorStats after = keras::allocator_stats(device);
    // Memory from the system on the hot path (should be 0), and tensor blocks reused from
    // the caching allocator's free lists per step.
    auto per_step = [&](std::size_t count) {
      return static_cast<double>(count) / static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1));
    };
    state.counters["system_allocations_per_step"] = per_step(after.fresh_allocations - before.fresh_allocations);
    state.counters["reused_blocks_per_step"] = per_step(after.cached_allocations - before.cached_allocations);
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());
    return;
  }
  // A non-finite loss means the step computes something wrong, not merely slowly. The loss is
  // not required to fall at every step: with Glorot-initialised weights and inputs in [0, 1),
  // Adam's first update overshoots and the second loss is higher (PyTorch does the same with
  // the same initialisation); the counters show where it started and ended.
  if (!std::isfinite(loss)) state.SkipWithError("training gave a non-finite loss");
  state.counters["first_loss"] = first_loss;
  state.counters["final_loss"] = loss;
  state.SetItemsProcessed(state.iterations() * batch_size);
  // The loss is read back every step (train_on_batch returns it), which also waits for the GPU.
  state.SetLabel(on_gpu ? "gpu:0" : "threads=" + std::to_string(keras::num_threads()));
}

// Wall-clock time: the engine's pool threads do part of each step.
BENCHMARK(BM_TrainingStep)
    ->ArgNames({"batch", "on_gpu"})
    ->ArgsProduct({{32, 128, 512}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
