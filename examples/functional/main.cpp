// Keras' functional API on Fashion-MNIST, the way a Keras user writes a model that is not a
// stack: two inputs (the top and the bottom half of each image) through one shared encoder, a
// residual, a merge, and two outputs (the class, and whether the item is footwear), trained
// with a loss and metrics per output. The same model trains on one process, under
// DataParallel, or under ModelParallel with Keras-style LayoutMap keys (the functional
// model's paths are "encoder/kernel", as in Keras); the graph has no code of its own for
// either.
//   functional                                    # one process
//   mpirun -np 2 functional --distribution data   # the batch split over 2 processes
//   mpirun -np 2 functional --distribution model  # the encoder and mixer split over 2
//   functional [--distribution none|data|model] [--epochs N] [--batch-size N]
//              [--data-dir DIR] [--min-accuracy X] [--min-footwear-accuracy X]
#include <cstdio>
#include <string>

#include "examples/common/flag_values.h"
#include "keras.h"

namespace {

namespace kd = keras::distribution;
using keras::KerasTensor;
namespace layers = keras::layers;

struct Flags {
  std::string distribution = "none";
  int epochs = 2;
  std::int64_t batch_size = 128;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  double min_accuracy = 0.0, min_footwear_accuracy = 0.0;
};

Flags parse_flags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::puts("usage: functional [--distribution none|data|model] [--epochs N] [--batch-size N] "
                "[--data-dir DIR] [--min-accuracy X] [--min-footwear-accuracy X]");
      std::exit(0);
    }
    if (i + 1 >= argc) throw keras::ValueError(keras::str(flag, " needs a value"));
    std::string value = argv[++i];
    if (flag == "--distribution") {
      if (value != "none" && value != "data" && value != "model") {
        throw keras::ValueError(keras::str("--distribution must be none, data or model, got '", value, "'"));
      }
      flags.distribution = value;
    } else if (flag == "--epochs") {
      flags.epochs = static_cast<int>(keras::examples::positive_count(flag, value));
    } else if (flag == "--batch-size") {
      flags.batch_size = keras::examples::positive_count(flag, value);
    } else if (flag == "--data-dir") {
      flags.data_dir = value;
    } else if (flag == "--min-accuracy") {
      flags.min_accuracy = keras::examples::flag_value<double>(flag, value);
    } else if (flag == "--min-footwear-accuracy") {
      flags.min_footwear_accuracy = keras::examples::flag_value<double>(flag, value);
    } else {
      throw keras::ValueError(keras::str("unknown flag '", flag, "' (see --help)"));
    }
  }
  return flags;
}

layers::DenseOptions named(const std::string& name) {
  layers::DenseOptions options;
  options.name = name;
  return options;
}

// The model, line for line as the Keras program would read.
keras::Model two_halves_model() {
  KerasTensor top = keras::Input({392}, "top");
  KerasTensor bottom = keras::Input({392}, "bottom");
  auto encoder = std::make_shared<layers::Dense>(128, "relu", named("encoder"));  // shared by both halves
  KerasTensor top_code = (*encoder)(top);
  KerasTensor bottom_code = (*encoder)(bottom);
  KerasTensor joined = layers::Concatenate()({top_code, bottom_code});
  KerasTensor mixed = layers::Dense(256, "relu", named("mixer"))(joined);
  KerasTensor residual = layers::Add()({mixed, joined});
  KerasTensor label = layers::Dense(10, "", named("label"))(residual);
  KerasTensor footwear = layers::Dense(1, "sigmoid", named("footwear"))(residual);
  return keras::Model({top, bottom}, {label, footwear}, "two_halves");
}

// Sandals (5), sneakers (7) and ankle boots (9).
keras::Tensor is_footwear(const keras::Tensor& labels) {
  using namespace keras;
  Tensor five = ops::equal(labels, ops::scalar_like(labels, 5));
  Tensor seven = ops::equal(labels, ops::scalar_like(labels, 7));
  Tensor nine = ops::equal(labels, ops::scalar_like(labels, 9));
  Tensor any = ops::logical_or(ops::logical_or(five, seven), nine);
  return ops::reshape(ops::cast(any, float32), {labels.dim(0), 1});
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Flags flags = parse_flags(argc, argv);
    kd::initialize();  // MPI under mpirun; one process otherwise
    const bool chief = kd::process_id() == 0;
    if (flags.distribution == "data") kd::set_distribution(std::make_shared<kd::DataParallel>());
    if (flags.distribution == "model") {
      auto map = std::make_shared<kd::LayoutMap>(kd::DeviceMesh({1, kd::num_processes()}, {"batch", "model"}));
      (*map)["encoder/kernel"] = {std::nullopt, "model"};  // column-parallel
      (*map)["encoder/bias"] = {"model"};
      (*map)["mixer/kernel"] = {"model", std::nullopt};    // row-parallel
      kd::set_distribution(std::make_shared<kd::ModelParallel>(map));
    }
    keras::set_random_seed(42);
    auto data = keras::io::load_fashion_mnist(flags.data_dir);
    auto halves = [](const keras::Tensor& images) {
      keras::Tensor features = keras::io::image_features(images);  // (N, 784) in [0, 1]
      std::int64_t n = features.dim(0);
      return std::vector<keras::Tensor>{keras::ops::slice(features, {0, 0}, {n, 392}),
                                        keras::ops::slice(features, {0, 392}, {n, 392})};
    };
    std::vector<keras::Tensor> x_train = halves(data.x_train), x_test = halves(data.x_test);
    std::vector<keras::Tensor> y_train = {data.y_train, is_footwear(data.y_train)};
    std::vector<keras::Tensor> y_test = {data.y_test, is_footwear(data.y_test)};

    keras::Model model = two_halves_model();
    model.summary();
    keras::CompileOptions compile;
    compile.loss = {keras::losses::SparseCategoricalCrossentropy(true), keras::losses::BinaryCrossentropy()};
    compile.loss_weights = {1.0, 0.5};
    compile.metrics = {{"accuracy"}, {"accuracy"}};
    model.compile(keras::optimizers::Adam(keras::optimizers::schedules::CosineDecay(2e-3, 1000)), compile);
    keras::FitOptions fit;
    fit.batch_size = flags.batch_size;
    fit.epochs = flags.epochs;
    fit.verbose = 2;
    model.fit(x_train, y_train, fit);
    keras::EvaluateOptions quiet;
    quiet.verbose = 0;
    auto results = model.evaluate(x_test, y_test, quiet);
    if (chief) {
      std::printf("test: loss %.4f, label accuracy %.4f, footwear accuracy %.4f\n", results["loss"],
                  results["label_accuracy"], results["footwear_accuracy"]);
    }
    if (results["label_accuracy"] < flags.min_accuracy || results["footwear_accuracy"] < flags.min_footwear_accuracy) {
      if (chief) std::fprintf(stderr, "below the required accuracy\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
}
