// One training step of a wide MLP (784-4096-4096-10, ReLU, Adam, sparse cross-entropy, global
// batch 128) under ModelParallel — the two hidden layers as Megatron's column -> row pair on a
// (1, P) mesh — beside DataParallel on the same P processes and the same global batch, the two
// measured in interleaved rounds (medians). Prints samples/s, bytes of parameters and Adam
// state per process, and the collectives one step issues against the Megatron count: one
// all-reduce of the (batch, 4096) activations forward per column/row pair, one backward — but
// none backward here, because the pair's input is the data, which needs no gradient.
//   mpirun -np P model_parallel_step [--steps N] [--warmup N] [--rounds N] [--batch-size N]
//                                    [--hidden N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "benchmarks/step_timing.h"
#include "benchmarks/step_flags.h"
#include "keras.h"

namespace {

namespace kd = keras::distribution;

struct Options : keras_benchmarks::StepFlags {
  int rounds = 3;
  std::int64_t hidden = 4096;
};

Options parse(int argc, char** argv) {
  Options options;
  options.warmup = 2;
  keras_benchmarks::parse_step_flags(argc, argv, options, [&](const std::string& flag, const std::string& text) {
    if (flag == "--rounds") options.rounds = static_cast<int>(keras_benchmarks::positive_integer(flag, text));
    else if (flag == "--hidden") options.hidden = keras_benchmarks::positive_integer(flag, text);
    else return false;
    return true;
  });
  return options;
}

struct Contender {
  std::string name;
  std::shared_ptr<kd::Distribution> distribution;
  std::shared_ptr<keras::Sequential> model;
  std::vector<double> step_seconds;
};

std::shared_ptr<keras::Sequential> make_model(const Options& options) {
  keras::set_random_seed(42);
  auto named = [](const char* name) {
    keras::layers::DenseOptions dense;
    dense.name = name;
    return dense;
  };
  auto model = std::make_shared<keras::Sequential>(
      std::vector<keras::AnyLayer>{keras::layers::Dense(options.hidden, "relu", named("up")),
                                   keras::layers::Dense(options.hidden, "relu", named("down")),
                                   keras::layers::Dense(10, "", named("classifier"))},
      "wide_mlp");
  model->compile(keras::optimizers::Adam(1e-3), keras::losses::SparseCategoricalCrossentropy(true));
  return model;
}

double timed_step(Contender& contender, const keras::Tensor& x, const keras::Tensor& y) {
  kd::set_distribution(contender.distribution);
  return keras_benchmarks::slowest_step_seconds(*contender.model, x, y);
}

using keras_benchmarks::median;

std::string megabytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", bytes / (1024.0 * 1024.0));
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options options = parse(argc, argv);
    kd::initialize();
    const int processes = kd::num_processes();
    const bool chief = kd::process_id() == 0;
    keras::Tensor x = keras::ops::random({keras::RandomDistribution::normal, 0, 1, 1}, {options.batch_size, 784});
    keras::Tensor y = keras::ops::cast(
        keras::ops::random({keras::RandomDistribution::uniform, 0, 10, 2}, {options.batch_size}, keras::float64),
        keras::int64);

    auto mesh = std::make_shared<kd::DeviceMesh>(std::vector<std::int64_t>{1, processes},
                                                 std::vector<std::string>{"batch", "model"});
    auto layout_map = std::make_shared<kd::LayoutMap>(mesh);
    (*layout_map)[".*up/kernel"] = {std::nullopt, "model"};
    (*layout_map)[".*up/bias"] = {"model"};
    (*layout_map)[".*down/kernel"] = {"model", std::nullopt};
    std::vector<Contender> contenders;
    contenders.push_back({"ModelParallel (1, P)", std::make_shared<kd::ModelParallel>(layout_map), nullptr, {}});
    contenders.push_back({"DataParallel (P,)", std::make_shared<kd::DataParallel>(), nullptr, {}});
    if (processes == 1) contenders.resize(1);  // one process: the two are the same program
    for (Contender& contender : contenders) {
      keras::clear_session();
      kd::set_distribution(contender.distribution);
      contender.model = make_model(options);
      for (int i = 0; i < options.warmup; ++i) contender.model->train_on_batch(x, y);
    }
    for (int round = 0; round < options.rounds; ++round) {
      for (Contender& contender : contenders) {
        for (int step = 0; step < options.steps; ++step) contender.step_seconds.push_back(timed_step(contender, x, y));
      }
    }
    if (chief) {
      std::printf("784-%lld-%lld-10 MLP, Adam, global batch %lld, %d processes, %d rounds x %d steps "
                  "interleaved (medians)\n",
                  static_cast<long long>(options.hidden), static_cast<long long>(options.hidden),
                  static_cast<long long>(options.batch_size), processes, options.rounds, options.steps);
      std::printf("%-22s %10s %12s %14s %14s  %s\n", "distribution", "step ms", "samples/s",
                  "params/proc", "Adam/proc", "collectives per step (process 0)");
    }
    for (Contender& contender : contenders) {
      kd::set_distribution(contender.distribution);
      std::size_t parameter_bytes = 0;
      for (keras::Variable* variable : contender.model->variables()) parameter_bytes += variable->value.nbytes();
      double step = median(contender.step_seconds);
      std::string collectives;
      for (const auto& total : contender.model->last_step_collectives()) {
        collectives += keras::str(collectives.empty() ? "" : "; ", total.count, " x ", total.kind, " over ",
                                  total.group, " = ", megabytes(double(total.bytes)));
      }
      if (chief) {
        std::printf("%-22s %10.1f %12.0f %14s %14s  %s\n", contender.name.c_str(), step * 1e3,
                    double(options.batch_size) / step, megabytes(double(parameter_bytes)).c_str(),
                    megabytes(double(contender.model->optimizer().state_bytes())).c_str(),
                    collectives.empty() ? "none" : collectives.c_str());
      }
    }
    if (chief && processes > 1) {
      double activations = double(options.batch_size) * double(options.hidden) * 4.0;
      std::printf("Megatron count for the pair: 1 all-reduce of %s forward, 0 backward (its input is the data)\n",
                  megabytes(activations).c_str());
      std::printf("ModelParallel / DataParallel step time: %.2f\n",
                  median(contenders[0].step_seconds) / median(contenders[1].step_seconds));
    }
    kd::set_distribution(nullptr);
    kd::finalize();
    return 0;
  } catch (const keras::Error& error) {
    std::fprintf(stderr, "model_parallel_step: %s\n", error.what());
    return 1;
  }
}
