// Trains Fashion-MNIST under ModelParallel: the hidden layers are split over the mesh's "model"
// axis (Megatron's column -> row pair: the first kernel by columns, the second by rows, one
// all-reduce of activations forward and one backward), and the batch over its "batch" axis.
// It prints model.summary() with the sharding plan first, then trains and evaluates.
//   mpirun -np 2 model_parallel --mesh 1x2          # 2 processes, the model split in two
//   mpirun -np 4 model_parallel --mesh 2x2          # 2 data shards x 2 model shards
//   model_parallel [--mesh BxM] [--model mlp|block] [--epochs N] [--batch-size N]
//                  [--data-dir DIR] [--min-test-accuracy X]
// --model block adds a LayerNormalization between the pair, where the activations are split by
// columns (a transformer-style block).
#include <chrono>
#include <cstdio>
#include <string>

#include "examples/common/flag_values.h"
#include "keras.h"

namespace {

namespace kd = keras::distribution;

struct Flags {
  std::int64_t batch_shards = 1, model_shards = 0;  // 0: all processes on the model axis
  std::string model = "mlp";
  int epochs = 3;
  std::int64_t batch_size = 128;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  double min_test_accuracy = 0.0;
};

Flags parse_flags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::puts("usage: model_parallel [--mesh BxM] [--model mlp|block] [--epochs N] "
                "[--batch-size N] [--data-dir DIR] [--min-test-accuracy X]");
      std::exit(0);
    }
    if (i + 1 >= argc) throw keras::ValueError(keras::str(flag, " needs a value"));
    std::string value = argv[++i];
    if (flag == "--mesh") {
      std::size_t x = value.find('x');
      if (x == std::string::npos) {
        throw keras::ValueError(keras::str("--mesh: expected BATCHxMODEL such as 2x2, got '", value, "'"));
      }
      flags.batch_shards = keras::examples::positive_count("--mesh", value.substr(0, x));
      flags.model_shards = keras::examples::positive_count("--mesh", value.substr(x + 1));
    } else if (flag == "--model") {
      if (value != "mlp" && value != "block") {
        throw keras::ValueError(keras::str("--model must be 'mlp' or 'block', got '", value, "'"));
      }
      flags.model = value;
    } else if (flag == "--epochs") {
      flags.epochs = static_cast<int>(keras::examples::positive_count(flag, value));
    } else if (flag == "--batch-size") {
      flags.batch_size = keras::examples::positive_count(flag, value);
    } else if (flag == "--data-dir") {
      flags.data_dir = value;
    } else if (flag == "--min-test-accuracy") {
      flags.min_test_accuracy = keras::examples::flag_value<double>(flag, value);
    } else {
      throw keras::ValueError(keras::str("unknown flag '", flag, "' (see --help)"));
    }
  }
  return flags;
}


}  // namespace

int main(int argc, char** argv) {
  try {
    Flags flags = parse_flags(argc, argv);
    kd::initialize();
    if (flags.model_shards == 0) flags.model_shards = kd::num_processes();
    keras::set_random_seed(42);
    // The mesh: (batch, model). The LayoutMap names the variables by their paths.
    auto mesh = std::make_shared<kd::DeviceMesh>(std::vector<std::int64_t>{flags.batch_shards, flags.model_shards},
                                                 std::vector<std::string>{"batch", "model"});
    auto layout_map = std::make_shared<kd::LayoutMap>(mesh);
    (*layout_map)[".*up/kernel"] = {std::nullopt, "model"};    // columns
    (*layout_map)[".*up/bias"] = {"model"};
    (*layout_map)[".*down/kernel"] = {"model", std::nullopt};  // rows: one all-reduce after
    if (flags.model == "block") {
      (*layout_map)[".*norm/gamma"] = {"model"};
      (*layout_map)[".*norm/beta"] = {"model"};
    }
    kd::set_distribution(std::make_shared<kd::ModelParallel>(layout_map));

    auto data = keras::io::load_fashion_mnist(flags.data_dir);
    keras::Tensor x_train = keras::io::image_features(data.x_train);
    keras::Tensor x_test = keras::io::image_features(data.x_test);
    namespace kl = keras::layers;
    auto named = [](const char* name) {
      kl::DenseOptions options;
      options.name = name;
      return options;
    };
    std::vector<keras::AnyLayer> stack = {kl::Dense(1024, "relu", named("up"))};
    // Normalising the column-sharded activations: two small all-reduces of row sums per call.
    if (flags.model == "block") stack.push_back(kl::LayerNormalization(1e-3, true, true, "norm"));
    stack.push_back(kl::Dense(256, "relu", named("down")));
    stack.push_back(kl::Dense(10, "", named("classifier")));
    keras::Sequential model(stack, "fashion_" + flags.model);
    model.compile(keras::optimizers::Adam(1e-3), keras::losses::SparseCategoricalCrossentropy(true),
                  {"accuracy"});
    // One step on a batch builds the variables and counts the collectives a step issues, so
    // the summary shows the whole plan before the long run.
    model.train_on_batch(keras::ops::slice(x_train, {0, 0}, {flags.batch_size, 784}),
                         keras::ops::slice(data.y_train, {0}, {flags.batch_size}));
    model.summary();
    auto start = std::chrono::steady_clock::now();
    model.fit(x_train, data.y_train, {.batch_size = flags.batch_size, .epochs = flags.epochs, .verbose = 2});
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    auto results = model.evaluate(x_test, data.y_test, {.batch_size = 1000, .verbose = 0});
    if (kd::process_id() == 0) {
      std::printf("test accuracy: %.4f  test loss: %.4f  (%.1f s per epoch on %d processes, mesh %lldx%lld)\n",
                  results["accuracy"], results["loss"], seconds / flags.epochs, kd::num_processes(),
                  static_cast<long long>(flags.batch_shards), static_cast<long long>(flags.model_shards));
    }
    if (results["accuracy"] < flags.min_test_accuracy) {
      std::fprintf(stderr, "model_parallel: test accuracy %.4f is below the required %.4f\n",
                   results["accuracy"], flags.min_test_accuracy);
      return 2;
    }
    return 0;
  } catch (const keras::Error& error) {
    std::fprintf(stderr, "model_parallel: %s\n", error.what());
    return 1;
  }
}
