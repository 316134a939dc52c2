// One training step of examples/transformer_lm's byte-level GPT (forward, sparse cross-entropy
// from logits over every position, backward, Adam), as ms/step, tokens/s and model FLOPs
// utilisation against the float32 FMA roof of the same threads measured in the same run. Under
// `mpirun -np P` it times the step under DataParallel and under ModelParallel (keras-hub's
// Gemma map on a 1 x P mesh) one after the other, the global batch the same. compare_keras_jax.py
// runs it beside the same model in Keras 3 + JAX.
//   [mpirun -np P] transformer_step [--steps N] [--warmup N] [--batch-size N] [--blocks N]
//                  [--width N] [--heads N] [--context N] [--only none|data_parallel|model_parallel]
//                  [--dtype-policy float32|mixed_bfloat16|...] [--json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/step_timing.h"
#include "examples/transformer_lm/byte_gpt.h"
#include "benchmarks/step_flags.h"
#include "keras.h"

namespace {

namespace kd = keras::distribution;

struct Options : keras_benchmarks::StepFlags {
  byte_gpt::Config model;
  std::string only;
};

Options parse(int argc, char** argv) {
  Options options;
  options.batch_size = 32;
  keras_benchmarks::parse_step_flags(argc, argv, options, [&](const std::string& flag, const std::string& text) {
    if (flag == "--only") {
      if (text != "none" && text != "data_parallel" && text != "model_parallel") {
        throw keras::ValueError("--only must be none, data_parallel or model_parallel, got '" + text + "'");
      }
      options.only = text;
      return true;
    }
    std::int64_t* target = flag == "--blocks"  ? &options.model.blocks
                           : flag == "--width" ? &options.model.width
                           : flag == "--heads" ? &options.model.heads
                           : flag == "--context" ? &options.model.context
                                                 : nullptr;
    if (target == nullptr) return false;
    *target = keras_benchmarks::positive_integer(flag, text);
    return true;
  });
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
    const std::int64_t context = options.model.context;
    std::mt19937_64 random(7);
    std::uniform_int_distribution<std::int64_t> byte(0, 255);
    std::vector<std::int64_t> tokens(static_cast<std::size_t>(options.batch_size * (context + 1)));
    for (auto& token : tokens) token = byte(random);
    keras::Tensor sequences = keras::Tensor::from_vector<std::int64_t>(tokens, {options.batch_size, context + 1});
    keras::Tensor x = keras::ops::slice(sequences, {0, 0}, {options.batch_size, context});
    keras::Tensor y = keras::ops::slice(sequences, {0, 1}, {options.batch_size, context});
    // The roof of the dtype the products compute in (step_timing.h): the FMA roof, or the bf16
    // matmul roof where mixed_bfloat16's products run on the CPU's bf16 instructions.
    const keras_benchmarks::FmaRoof roof =
        keras_benchmarks::compute_roof(keras::DTypePolicy(options.dtype_policy).compute_dtype());
    const double flops = byte_gpt::training_step_flops(options.model, options.batch_size, context);

    std::vector<std::string> modes;
    if (processes == 1) modes = {"none"};
    else modes = {"data_parallel", "model_parallel"};
    if (!options.only.empty()) modes = {options.only};
    for (const std::string& mode : modes) {
      keras::clear_session();
      keras::set_random_seed(42);
      if (mode == "data_parallel") {
        kd::set_distribution(std::make_shared<kd::DataParallel>());
      } else if (mode == "model_parallel") {
        auto mesh = std::make_shared<kd::DeviceMesh>(std::vector<std::int64_t>{1, processes},
                                                     std::vector<std::string>{"batch", "model"});
        kd::set_distribution(std::make_shared<kd::ModelParallel>(byte_gpt::gemma_layout_map(mesh)));
      } else if (processes > 1) {
        throw keras::ValueError("--only none runs on one process; start it without mpirun");
      }
      byte_gpt::BytePredictor model(options.model);
      model.compile(keras::optimizers::Adam(1e-3), keras::losses::SparseCategoricalCrossentropy(true));
      double step = keras_benchmarks::median_step_seconds(model, x, y, options.warmup, options.steps);
      kd::set_distribution(nullptr);
      if (!leader) continue;
      const double tokens_per_second = static_cast<double>(options.batch_size * context) / step;
      // Utilisation of every process's threads together: the job's FLOPs over the job's roof.
      const double utilisation = roof.gflops > 0 ? flops / step / 1e9 / (roof.gflops * processes) : 0;
      if (options.json) {
        std::printf("{\"mode\": \"%s\", \"processes\": %d, \"threads\": %d, \"batch\": %lld, \"context\": %lld, "
                    "\"step_ms\": %.3f, \"tokens_per_second\": %.1f, \"model_gflop_per_step\": %.3f, "
                    "\"fma_roof_gflops\": %.2f, \"fma_roof\": \"%s\", \"mfu\": %.4f, \"dtype_policy\": \"%s\"}\n",
                    mode.c_str(), processes, keras::num_threads(), static_cast<long long>(options.batch_size),
                    static_cast<long long>(context), step * 1e3, tokens_per_second, flops / 1e9, roof.gflops,
                    roof.name.c_str(), utilisation, options.dtype_policy.c_str());
      } else {
        std::printf("%s on %d process(es) x %d thread(s), batch %lld x %lld bytes: %.1f ms/step, %.0f tokens/s, "
                    "%.2f GFLOP/step, MFU %.1f%% of the %s roof (%.1f GFLOP/s a process), policy %s\n",
                    mode.c_str(), processes, keras::num_threads(), static_cast<long long>(options.batch_size),
                    static_cast<long long>(context), step * 1e3, tokens_per_second, flops / 1e9,
                    utilisation * 100, roof.name.c_str(), roof.gflops, options.dtype_policy.c_str());
      }
    }
    kd::finalize();
    return 0;
  } catch (const keras::Error& error) {
    std::fprintf(stderr, "transformer_step: %s\n", error.what());
    return 1;
  }
}
