// One data-parallel training step of the MLP 784-1024-1024-10 (ReLU, sparse cross-entropy,
// Adam), global batch 128, run under `mpirun -np P`. Prints, on process 0, the step time and
// samples/s with gradient synchronisation (DataParallel), and the step time of the same
// processes training on their local slice without any synchronisation: the difference is the
// exposed communication. compare_data_parallel.py runs it beside PyTorch DDP (gloo).
//   mpirun -np P data_parallel_step [--steps N] [--warmup N] [--batch-size N] [--json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "benchmarks/step_timing.h"
#include "benchmarks/step_flags.h"
#include "keras.h"

namespace {

namespace kd = keras::distribution;

using Options = keras_benchmarks::StepFlags;

Options parse(int argc, char** argv) {
  Options options;
  options.steps = 30;
  options.warmup = 5;
  keras_benchmarks::parse_step_flags(argc, argv, options);
  return options;
}

// Median seconds per step of `steps` calls, after `warmup`; the slowest process decides.
double time_steps(keras::Sequential& model, const keras::Tensor& x, const keras::Tensor& y,
                  const Options& options) {
  for (int i = 0; i < options.warmup; ++i) model.train_on_batch(x, y);
  std::vector<double> seconds;
  double sync_seconds = 0;
  for (int i = 0; i < options.steps; ++i) {
    seconds.push_back(keras_benchmarks::slowest_step_seconds(model, x, y));
    sync_seconds += model.last_gradient_sync_seconds();
  }
  if (sync_seconds > 0 && kd::process_id() == 0 && !options.json) {
    std::printf("  (process 0 spent %.2f ms per step in gradient collectives)\n",
                sync_seconds / options.steps * 1e3);
  }
  return keras_benchmarks::median(seconds);
}

keras::Sequential make_model() {
  keras::clear_session();
  keras::set_random_seed(42);
  keras::Sequential model({keras::layers::Dense(1024, "relu"), keras::layers::Dense(1024, "relu"),
                           keras::layers::Dense(10)});
  model.compile(keras::optimizers::Adam(1e-3),
                keras::losses::SparseCategoricalCrossentropy(true));
  return model;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options options = parse(argc, argv);
    kd::initialize();
    int processes = kd::num_processes();
    if (options.batch_size % processes != 0) {
      throw keras::ValueError("--batch-size must be divisible by the number of processes");
    }
    keras::Tensor x = keras::ops::random({keras::RandomDistribution::uniform, 0, 1, 7},
                                         {options.batch_size, 784});
    keras::Tensor labels = keras::ops::cast(
        keras::ops::random({keras::RandomDistribution::uniform, 0, 10, 8}, {options.batch_size},
                           keras::float64),
        keras::int64);

    keras::Sequential synced = make_model();  // make_model's clear_session resets the distribution
    kd::set_distribution(std::make_shared<kd::DataParallel>());
    double with_sync = time_steps(synced, x, labels, options);

    // The same processes, each on its own slice, no communication at all.
    kd::set_distribution(nullptr);
    std::int64_t local = options.batch_size / processes;
    keras::Tensor x_local = keras::ops::slice(x, {kd::process_id() * local, 0}, {local, 784});
    keras::Tensor y_local = keras::ops::slice(labels, {kd::process_id() * local}, {local});
    keras::Sequential alone = make_model();
    double without_sync = time_steps(alone, x_local, y_local, options);

    if (kd::process_id() == 0) {
      double samples_per_second = double(options.batch_size) / with_sync;
      double exposed = std::max(0.0, with_sync - without_sync) / with_sync;
      if (options.json) {
        std::printf("{\"processes\": %d, \"threads\": %d, \"global_batch\": %lld, "
                    "\"step_ms\": %.4f, \"step_without_sync_ms\": %.4f, \"samples_per_second\": "
                    "%.1f, \"exposed_communication\": %.4f}\n",
                    processes, keras::num_threads(), static_cast<long long>(options.batch_size),
                    with_sync * 1e3, without_sync * 1e3, samples_per_second, exposed);
      } else {
        std::printf("processes %d x %d threads, global batch %lld: %.2f ms/step (%.0f samples/s); "
                    "without sync %.2f ms/step; exposed communication %.0f%% of the step\n",
                    processes, keras::num_threads(), static_cast<long long>(options.batch_size),
                    with_sync * 1e3, samples_per_second, without_sync * 1e3, exposed * 100);
      }
    }
    kd::finalize();
    return 0;
  } catch (const keras::Error& error) {
    std::fprintf(stderr, "data_parallel_step: %s\n", error.what());
    return 1;
  }
}
