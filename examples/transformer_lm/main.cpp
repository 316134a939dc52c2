// A byte-level GPT-style language model trained on the text of Debian's `fortunes` package: a
// subclassed model of decoder blocks (pre-norm causal MultiHeadAttention and a GELU
// feed-forward, both residual), written as users write one, trained on 1 process, DataParallel
// on several, or ModelParallel with keras-hub's Gemma-style layout map. It prints the model
// summary (with the layouts), the loss and perplexity per epoch on held-out files, and 200
// sampled bytes at the end (temperature, top-k).
//   transformer_lm [--epochs N] [--steps-per-epoch N] [--batch-size N] [--learning-rate X]
//                  [--blocks N] [--width N] [--heads N] [--context N] [--seed N]
//                  [--distribution none|data_parallel|model_parallel] [--mesh BxM]
//                  [--device cpu|gpu] [--csv-log PATH.csv] [--text-dir DIR]
//                  [--max-validation-loss X] [--dtype-policy float32|mixed_bfloat16|...]
//   mpirun -np 2 transformer_lm --distribution data_parallel
//   mpirun -np 4 transformer_lm --distribution model_parallel --mesh 2x2
// The files of --text-dir (default /usr/share/games/fortunes) are split by file: every fifth
// file, in name order, is held out for validation.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "examples/transformer_lm/byte_gpt.h"
#include "examples/common/flag_values.h"
#include "keras.h"

namespace {

namespace kd = keras::distribution;
namespace kl = keras::layers;
using keras::Tensor;

struct Flags {
  int epochs = 10;
  int steps_per_epoch = 50;
  // 4 blocks of width 128 at batch 32 x 128 bytes reach a validation loss below 2.0
  // nats/byte in about 4 minutes on this 2-core VM (README, "Transformers"); width 256 at
  // batch 16 was at 2.71 after 5 minutes.
  std::int64_t batch_size = 32;
  double learning_rate = 3e-3;
  std::int64_t blocks = 4, width = 128, heads = 4, context = 128;
  std::uint64_t seed = 42;
  std::string distribution = "none";
  std::int64_t batch_shards = 1, model_shards = 0;
  std::string device = "cpu";
  std::string csv_log;
  std::string text_dir = "/usr/share/games/fortunes";
  double max_validation_loss = 0;  // > 0: exit with status 2 above it (CTest)
  std::string dtype_policy = "float32";  // Keras' global policy (layers/dtype_policy.h)
};

Flags parse_flags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::puts("usage: transformer_lm [--epochs N] [--steps-per-epoch N] [--batch-size N] [--learning-rate X]\n"
                "                      [--blocks N] [--width N] [--heads N] [--context N] [--seed N]\n"
                "                      [--distribution none|data_parallel|model_parallel] [--mesh BxM]\n"
                "                      [--device cpu|gpu] [--csv-log PATH.csv] [--text-dir DIR]\n"
                "                      [--max-validation-loss X] [--dtype-policy NAME]");
      std::exit(0);
    }
    if (i + 1 >= argc) throw keras::ValueError(keras::str(flag, " needs a value"));
    std::string value = argv[++i];
    if (flag == "--epochs") flags.epochs = static_cast<int>(keras::examples::positive_count(flag, value));
    else if (flag == "--steps-per-epoch") flags.steps_per_epoch = static_cast<int>(keras::examples::positive_count(flag, value));
    else if (flag == "--batch-size") flags.batch_size = keras::examples::positive_count(flag, value);
    else if (flag == "--learning-rate") flags.learning_rate = keras::examples::positive_real(flag, value);
    else if (flag == "--blocks") flags.blocks = keras::examples::positive_count(flag, value);
    else if (flag == "--width") flags.width = keras::examples::positive_count(flag, value);
    else if (flag == "--heads") flags.heads = keras::examples::positive_count(flag, value);
    else if (flag == "--context") flags.context = keras::examples::positive_count(flag, value);
    else if (flag == "--seed") flags.seed = static_cast<std::uint64_t>(keras::examples::positive_count(flag, value));
    else if (flag == "--csv-log") flags.csv_log = value;
    else if (flag == "--text-dir") flags.text_dir = value;
    else if (flag == "--dtype-policy") flags.dtype_policy = keras::DTypePolicy(value).name();  // checks it
    else if (flag == "--max-validation-loss") flags.max_validation_loss = keras::examples::positive_real(flag, value);
    else if (flag == "--distribution") {
      if (value != "none" && value != "data_parallel" && value != "model_parallel") {
        throw keras::ValueError(keras::str("--distribution must be none, data_parallel or model_parallel, got '",
                                           value, "'"));
      }
      flags.distribution = value;
    } else if (flag == "--mesh") {
      std::size_t x = value.find('x');
      if (x == std::string::npos) {
        throw keras::ValueError(keras::str("--mesh: expected BATCHxMODEL such as 2x2, got '", value, "'"));
      }
      flags.batch_shards = keras::examples::positive_count("--mesh", value.substr(0, x));
      flags.model_shards = keras::examples::positive_count("--mesh", value.substr(x + 1));
    } else if (flag == "--device") {
      if (value != "cpu" && value != "gpu") {
        throw keras::ValueError(keras::str("--device must be cpu or gpu, got '", value, "'"));
      }
      flags.device = value;
    } else {
      throw keras::ValueError(keras::str("unknown flag '", flag, "' (see --help)"));
    }
  }
  if (flags.width % flags.heads != 0) {
    throw keras::ValueError(keras::str("--width ", flags.width, " must be a multiple of --heads ", flags.heads));
  }
  return flags;
}

// The bytes of the fortune files, the training and the held-out ones apart.
struct Text {
  std::string train, validation;
};

Text read_fortunes(const std::string& directory) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(directory)) {
    throw keras::FileNotFoundError(keras::str("no directory '", directory, "': install Debian's fortunes package "
                                              "(scripts/install_dependencies.sh does) or pass --text-dir"));
  }
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(directory)) {
    const std::string extension = entry.path().extension().string();
    if (entry.is_regular_file() && extension != ".dat" && extension != ".u8") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  Text text;
  for (std::size_t i = 0; i < files.size(); ++i) {
    std::ifstream in(files[i], std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    (i % 5 == 4 ? text.validation : text.train) += bytes;
  }
  if (text.train.size() < 100000 || text.validation.size() < 10000) {
    throw keras::ValueError(keras::str("'", directory, "' holds ", text.train.size(), " training and ",
                                       text.validation.size(), " validation bytes; expected the fortunes text"));
  }
  return text;
}

// `count` windows of context + 1 bytes at random offsets: inputs the first context bytes,
// labels the same shifted by one.
std::pair<Tensor, Tensor> windows(const std::string& text, std::int64_t count, std::int64_t context,
                                  std::mt19937_64& random) {
  std::uniform_int_distribution<std::size_t> offset(0, text.size() - static_cast<std::size_t>(context) - 1);
  std::vector<std::int64_t> inputs, labels;
  for (std::int64_t w = 0; w < count; ++w) {
    std::size_t start = offset(random);
    for (std::int64_t t = 0; t < context; ++t) {
      inputs.push_back(static_cast<unsigned char>(text[start + static_cast<std::size_t>(t)]));
      labels.push_back(static_cast<unsigned char>(text[start + static_cast<std::size_t>(t) + 1]));
    }
  }
  return {Tensor::from_vector<std::int64_t>(inputs, {count, context}),
          Tensor::from_vector<std::int64_t>(labels, {count, context})};
}

// Continues `prompt` by `count` bytes, each drawn from the top_k most likely next bytes at
// `temperature`. Every process draws the same bytes (the same seed), as the model's forward
// pass under a distribution needs every process.
std::string sample(keras::Model& model, std::string prompt, int count, std::int64_t context, double temperature,
                   int top_k, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::string generated;
  for (int step = 0; step < count; ++step) {
    std::string window = prompt.size() > static_cast<std::size_t>(context)
                             ? prompt.substr(prompt.size() - static_cast<std::size_t>(context)) : prompt;
    std::vector<std::int64_t> ids;
    for (unsigned char byte : window) ids.push_back(byte);
    Tensor tokens = Tensor::from_vector<std::int64_t>(ids, {1, static_cast<std::int64_t>(ids.size())});
    Tensor logits = model.predict(tokens, 1);
    std::vector<double> last = keras::ops::slice(logits, {0, logits.dim(1) - 1, 0}, {1, 1, 256}).to_vector<double>();
    std::vector<int> order(256);
    for (int i = 0; i < 256; ++i) order[static_cast<std::size_t>(i)] = i;
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      [&](int a, int b) { return last[static_cast<std::size_t>(a)] > last[static_cast<std::size_t>(b)]; });
    std::vector<double> weights;
    for (int k = 0; k < top_k; ++k) {
      weights.push_back(std::exp((last[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])] -
                                  last[static_cast<std::size_t>(order[0])]) / temperature));
    }
    std::discrete_distribution<int> pick(weights.begin(), weights.end());
    char byte = static_cast<char>(order[static_cast<std::size_t>(pick(random))]);
    prompt += byte;
    generated += byte;
  }
  return generated;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Flags flags = parse_flags(argc, argv);
    kd::initialize();
    const bool leader = kd::process_id() == 0;
    keras::set_random_seed(flags.seed);
    if (flags.distribution == "data_parallel") {
      kd::set_distribution(std::make_shared<kd::DataParallel>());
    } else if (flags.distribution == "model_parallel") {
      if (flags.model_shards == 0) flags.model_shards = kd::num_processes() / flags.batch_shards;
      auto mesh = std::make_shared<kd::DeviceMesh>(std::vector<std::int64_t>{flags.batch_shards, flags.model_shards},
                                                   std::vector<std::string>{"batch", "model"});
      kd::set_distribution(std::make_shared<kd::ModelParallel>(byte_gpt::gemma_layout_map(mesh)));
    }
    if (flags.device == "gpu") keras::set_default_device(keras::Device::gpu(kd::require_local_gpu()));

    Text text = read_fortunes(flags.text_dir);
    std::mt19937_64 random(flags.seed);
    auto [x_validation, y_validation] = windows(text.validation, 64, flags.context, random);
    keras::mixed_precision::set_global_policy(flags.dtype_policy);
    byte_gpt::BytePredictor model({flags.blocks, flags.width, flags.heads, flags.context});
    std::shared_ptr<keras::optimizers::Optimizer> optimizer =
        std::make_shared<keras::optimizers::Adam>(flags.learning_rate);
    if (keras::DTypePolicy(flags.dtype_policy).compute_dtype() == keras::float16) {
      optimizer = std::make_shared<keras::optimizers::LossScaleOptimizer<keras::optimizers::Adam>>(
          keras::optimizers::Adam(flags.learning_rate));
    }
    model.compile(optimizer, keras::losses::SparseCategoricalCrossentropy(/*from_logits=*/true));
    {
      auto [x, y] = windows(text.train, flags.batch_size, flags.context, random);
      model.train_on_batch(x, y);  // builds the model, so the summary shows the plan
    }
    model.summary();
    if (leader) {
      std::printf("%zu training bytes, %zu validation bytes; %d epochs of %d steps of %lld x %lld bytes\n",
                  text.train.size(), text.validation.size(), flags.epochs, flags.steps_per_epoch,
                  static_cast<long long>(flags.batch_size), static_cast<long long>(flags.context));
    }
    std::FILE* csv = nullptr;
    if (leader && !flags.csv_log.empty()) {
      csv = std::fopen(flags.csv_log.c_str(), "w");
      if (csv == nullptr) throw keras::ValueError(keras::str("cannot write --csv-log '", flags.csv_log, "'"));
      std::fprintf(csv, "epoch,loss,val_loss\n");  // Keras CSVLogger's columns (plot_history.py)
    }
    double validation_loss = 0;
    auto start = std::chrono::steady_clock::now();
    for (int epoch = 0; epoch < flags.epochs; ++epoch) {
      auto [x, y] = windows(text.train, flags.batch_size * flags.steps_per_epoch, flags.context, random);
      keras::History history = model.fit(x, y, {.batch_size = flags.batch_size, .epochs = 1, .shuffle = false,
                                                .verbose = 0});
      double loss = history.history["loss"].back();
      validation_loss = model.evaluate(x_validation, y_validation, {.batch_size = 16, .verbose = 0})["loss"];
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (leader) {
        std::printf("epoch %d/%d  loss %.4f  val_loss %.4f nats/byte  val perplexity %.2f  (%.0f s)\n", epoch + 1,
                    flags.epochs, loss, validation_loss, std::exp(validation_loss), seconds);
        std::fflush(stdout);
      }
      if (csv != nullptr) std::fprintf(csv, "%d,%.6f,%.6f\n", epoch, loss, validation_loss);
    }
    if (csv != nullptr) std::fclose(csv);
    std::string prompt = "Q: What is the meaning of life?\nA:";
    std::string generated = sample(model, prompt, 200, flags.context, 0.8, 20, flags.seed);
    if (leader) std::printf("--- 200 sampled bytes (temperature 0.8, top-k 20) ---\n%s%s\n---\n", prompt.c_str(),
                            generated.c_str());
    if (flags.max_validation_loss > 0 && validation_loss > flags.max_validation_loss) {
      std::fprintf(stderr, "transformer_lm: validation loss %.4f is above the required %.4f\n", validation_loss,
                   flags.max_validation_loss);
      return 2;
    }
    return 0;
  } catch (const keras::Error& error) {
    std::fprintf(stderr, "transformer_lm: %s\n", error.what());
    return 1;
  }
}
