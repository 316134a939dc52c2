// One training step of the Keras JAX guide's convnet (examples/fashion_mnist/guide_convnet.h)
// on 28x28x1 images, sparse cross-entropy from logits, Adam: ms/step, images/s and model FLOPs
// utilisation against the float32 FMA roof of the same threads measured in the same run. Under
// `mpirun -np P` it times DataParallel with the BatchNormalizations unsynchronized (Keras'
// default) and synchronized, one after the other, the global batch the same.
// compare_keras_jax.py runs it beside the same model in Keras 3 + JAX.
//   [mpirun -np P] convnet_step [--steps N] [--warmup N] [--batch-size N]
//                               [--dtype-policy float32|mixed_bfloat16|...] [--json]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "benchmarks/step_timing.h"
#include "examples/fashion_mnist/guide_convnet.h"
#include "benchmarks/step_flags.h"
#include "keras.h"

namespace {

namespace kd = keras::distribution;

using Options = keras_benchmarks::StepFlags;

Options parse(int argc, char** argv) {
  Options options;
  options.steps = 20;
  keras_benchmarks::parse_step_flags(argc, argv, options);
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options options = parse(argc, argv);
    kd::initialize();
    const int processes = kd::num_processes();
    const bool leader = kd::process_id() == 0;
    if (options.batch_size % processes != 0) {
      throw keras::ValueError("--batch-size must be divisible by the number of processes");
    }
    // Pixels 0..255 and labels, as Fashion-MNIST's.
    keras::Tensor x = keras::ops::random({keras::RandomDistribution::uniform, 0, 255, 7},
                                         {options.batch_size, 28, 28, 1});
    keras::Tensor y = keras::ops::cast(keras::ops::random({keras::RandomDistribution::uniform, 0, 10, 8},
                                                          {options.batch_size}, keras::float64),
                                       keras::int64);
    // The roof of the dtype the convolutions and products compute in (step_timing.h).
    const keras_benchmarks::FmaRoof roof =
        keras_benchmarks::compute_roof(keras::DTypePolicy(options.dtype_policy).compute_dtype());
    std::vector<std::string> modes = processes == 1 ? std::vector<std::string>{"none"}
                                                    : std::vector<std::string>{"data_parallel",
                                                                               "data_parallel_synchronized"};
    for (const std::string& mode : modes) {
      keras::clear_session();
      keras::set_random_seed(42);
      if (mode != "none") kd::set_distribution(std::make_shared<kd::DataParallel>());
      keras::Sequential model = guide_convnet::make(mode == "data_parallel_synchronized");
      model.compile(keras::optimizers::Adam(1e-3), keras::losses::SparseCategoricalCrossentropy(true));
      double step = keras_benchmarks::median_step_seconds(model, x, y, options.warmup, options.steps);
      const double flops = 6.0 * guide_convnet::forward_multiply_adds(model) * double(options.batch_size);
      kd::set_distribution(nullptr);
      if (!leader) continue;
      const double images_per_second = static_cast<double>(options.batch_size) / step;
      const double utilisation = roof.gflops > 0 ? flops / step / 1e9 / (roof.gflops * processes) : 0;
      if (options.json) {
        std::printf("{\"mode\": \"%s\", \"processes\": %d, \"threads\": %d, \"batch\": %lld, \"step_ms\": %.3f, "
                    "\"images_per_second\": %.1f, \"model_gflop_per_step\": %.4f, \"fma_roof_gflops\": %.2f, \"fma_roof\": \"%s\", "
                    "\"mfu\": %.4f, \"dtype_policy\": \"%s\"}\n",
                    mode.c_str(), processes, keras::num_threads(), static_cast<long long>(options.batch_size),
                    step * 1e3, images_per_second, flops / 1e9, roof.gflops, roof.name.c_str(), utilisation,
                    options.dtype_policy.c_str());
      } else {
        std::printf("%s on %d process(es) x %d thread(s), batch %lld: %.2f ms/step, %.0f images/s, %.3f GFLOP/step, "
                    "MFU %.1f%% of the %s roof (%.1f GFLOP/s a process), policy %s\n",
                    mode.c_str(), processes, keras::num_threads(), static_cast<long long>(options.batch_size),
                    step * 1e3, images_per_second, flops / 1e9, utilisation * 100, roof.name.c_str(), roof.gflops,
                    options.dtype_policy.c_str());
      }
    }
    kd::finalize();
    return 0;
  } catch (const keras::Error& error) {
    std::fprintf(stderr, "convnet_step: %s\n", error.what());
    return 1;
  }
}
