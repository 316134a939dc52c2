// .keras archives made here: every layer class load_model can make survives save and load
// (same config, same predictions), one's own layers through register_layer, and hostile
// archives — not a zip, truncated, a zip bomb, an entry lying about its size, a config that
// nests too deep, fields and classes keras-cpp does not support — are typed errors naming what
// is wrong. Keras' own archives are tests/keras_files_test.cpp's.
#include <zip.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "keras.h"
#include "saving/layer_registry.h"
#include "tests/test_helpers.h"

namespace keras {
namespace {

using testing::expect_throw_with;

class KerasArchiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clear_session();
    set_random_seed(5);
    directory_ = std::filesystem::temp_directory_path() / ("keras_archive_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }
  std::string file(const std::string& name) const { return (directory_ / name).string(); }
  // edited.keras holding `config` as its config.json and `weights` as its weights.
  std::string edited_archive(const std::string& config, const std::string& weights) const;
  std::filesystem::path directory_;
};

// A Sequential's config.json: an InputLayer of 4 features, then `layer` (one layer's JSON),
// then `beside` (more top-level fields, such as a compile_config) when given.
std::string sequential_config(const std::string& layer, const std::string& beside = "") {
  return R"({"module": "keras", "class_name": "Sequential", "config": {"name": "s", "layers": [
      {"module": "keras.layers", "class_name": "InputLayer", "config": {"batch_shape": [null, 4], "dtype": "float32", "name": "i"}},
      )" + layer + "]}" + (beside.empty() ? "" : ", " + beside) + "}";
}

// Every layer's config, by name, without the seeds a reload draws afresh.
std::map<std::string, nlohmann::json> configs_of(const Model& model) {
  std::map<std::string, nlohmann::json> configs;
  for (const LayerPtr& layer : model.layers()) configs[layer->name()] = layer->get_config();
  return configs;
}

// An image branch and a sequence branch that between them hold every layer class
// saving/layer_registry.h can make.
std::shared_ptr<Model> every_layer_model() {
  KerasTensor image = Input({8, 8, 2}, "image");
  layers::Conv2DOptions conv;
  conv.padding = "same";
  conv.activation = "relu";
  KerasTensor x = layers::Conv2D(4, {3}, conv)(layers::Rescaling(0.5, 0.1)(image));
  x = layers::ReLU(layers::ReLUOptions{.max_value = 6.0, .negative_slope = 0.1})(layers::BatchNormalization()(x));
  x = layers::AveragePooling2D({2, 2}, layers::Pooling2DOptions{.strides = {1}})(layers::MaxPooling2D()(x));
  KerasTensor pooled = layers::GlobalAveragePooling2D()(x);  // (4)
  KerasTensor flat = layers::Dense(4, "tanh")(layers::Flatten()(x));
  KerasTensor image_features = layers::Concatenate()({pooled, flat});  // (8)

  KerasTensor tokens = Input({5}, int64, "tokens");
  KerasTensor h = layers::Embedding(11, 8)(tokens);  // (5, 8)
  h = layers::LayerNormalization()(layers::MultiHeadAttention(2, 4)(h));
  layers::EinsumDenseOptions einsum;
  einsum.bias_axes = "d";
  einsum.activation = "gelu";
  h = layers::EinsumDense("abc,cd->abd", {-1, 8}, einsum)(h);
  h = layers::Softmax()(layers::RMSNormalization()(h));
  KerasTensor sequence_features = layers::Dense(8)(layers::Reshape({40})(layers::Dropout(0.3)(h)));

  KerasTensor a = layers::Add()({image_features, sequence_features});
  KerasTensor s = layers::Subtract()({image_features, sequence_features});
  KerasTensor m = layers::Multiply()({a, s});
  KerasTensor merged = layers::Average()({layers::Maximum()({a, m}), layers::Minimum()({s, m})});
  return std::make_shared<Model>(std::vector<KerasTensor>{image, tokens},
                                 layers::Activation("sigmoid")(layers::Dense(3)(merged)), "every_layer");
}

TEST_F(KerasArchiveTest, EveryLayerClassSurvivesSaveAndLoad) {
  std::shared_ptr<Model> model = every_layer_model();
  Tensor images = testing::random_tensor({3, 8, 8, 2}, 1, float32);
  Tensor tokens = ops::cast(testing::random_tensor({3, 5}, 2, float32, 0.0, 10.99), int64);
  // Moving statistics away from their start, so the file carries them.
  model->compile(optimizers::Adam(0.01), "mse");
  model->fit({images, tokens}, {testing::random_tensor({3, 3}, 3, float32)},
             {.batch_size = 3, .epochs = 2, .verbose = 0});
  std::vector<Tensor> before = (*model)({images, tokens});
  model->save(file("every.keras"));

  std::shared_ptr<Model> loaded = load_model(file("every.keras"));
  std::vector<Tensor> after = (*loaded)({images, tokens});
  EXPECT_EQ(after[0].to_vector<double>(), before[0].to_vector<double>());
  std::map<std::string, nlohmann::json> expected = configs_of(*model), got = configs_of(*loaded);
  ASSERT_EQ(got.size(), expected.size());
  std::set<std::string> classes;
  for (const LayerPtr& layer : loaded->layers()) classes.insert(layer->class_name());
  EXPECT_EQ(classes.size(), 26u) << "one of each class saving/layer_registry.h makes";
  for (const auto& [name, config] : expected) EXPECT_EQ(got.at(name), config) << name;
}

TEST_F(KerasArchiveTest, ASharedLayerCalledAtTwoDepthsLoads) {
  // d(e(d(x))): the config lists d (both calls) before e, whose output d's second call reads.
  KerasTensor x = Input({4}, "x");
  auto shared = std::make_shared<layers::Dense>(4, "tanh", layers::DenseOptions{.name = "d"});
  KerasTensor once = (*shared)(x);
  KerasTensor middle = layers::Dense(4, "relu", layers::DenseOptions{.name = "e"})(once);
  Model model(x, (*shared)(middle), "shared_twice");
  Tensor inputs = testing::random_tensor({3, 4}, 1, float32);
  Tensor before = model(inputs);
  model.save(file("shared.keras"));
  std::shared_ptr<Model> loaded = load_model(file("shared.keras"));
  EXPECT_EQ((*loaded)(inputs).to_vector<double>(), before.to_vector<double>());
  EXPECT_EQ(loaded->layers().size(), 3u);
}

// A layer of one's own: a scaled identity with one argument.
class Scale : public LayerOf<Scale> {
 public:
  explicit Scale(double factor, const std::string& name = "") : LayerOf("scale", name), factor_(factor) {}
  Tensor call(const Tensor& inputs, bool) override { return ops::multiply(inputs, Tensor::scalar(factor_)); }
  nlohmann::json get_config() const override {
    nlohmann::json config = Layer::get_config();
    config["factor"] = factor_;
    return config;
  }

 private:
  double factor_;
};

TEST_F(KerasArchiveTest, LayersOfOnesOwnNeedRegistering) {
  Sequential model({layers::Dense(3), Scale(2.5)});
  Tensor x = testing::random_tensor({2, 4}, 1, float32);
  Tensor before = model(x);
  expect_throw_with<ValueError>([&] { model.save(file("scaled.keras")); }, "register it with keras::register_layer");
  register_layer("my_package>Scale", "Scale", [](LayerConfig& config) -> LayerPtr {
    std::string name = config.name();
    return std::make_shared<Scale>(config.number("factor"), name);
  });
  model.save(file("scaled.keras"));
  std::shared_ptr<Model> loaded = load_model(file("scaled.keras"));
  EXPECT_EQ((*loaded)(x).to_vector<double>(), before.to_vector<double>());
}

// Writes a zip of `entries` (name, bytes), compressed or stored.
void write_zip(const std::string& path, const std::vector<std::pair<std::string, std::string>>& entries,
               bool compress = false) {
  int code = 0;
  zip_t* archive = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code);
  ASSERT_NE(archive, nullptr);
  for (const auto& [name, bytes] : entries) {
    zip_source_t* source = zip_source_buffer(archive, bytes.data(), bytes.size(), 0);
    zip_int64_t index = zip_file_add(archive, name.c_str(), source, ZIP_FL_OVERWRITE);
    ASSERT_GE(index, 0);
    zip_set_file_compression(archive, static_cast<zip_uint64_t>(index), compress ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 9);
  }
  ASSERT_EQ(zip_close(archive), 0);
}

std::string KerasArchiveTest::edited_archive(const std::string& config, const std::string& weights) const {
  write_zip(file("edited.keras"), {{"config.json", config}, {"model.weights.h5", weights}});
  return file("edited.keras");
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The archive of a small model with its config.json replaced by `config`.
std::string mlp_config() {
  return R"({"module": "keras", "class_name": "Sequential", "config": {"name": "s", "layers": [
    {"module": "keras.layers", "class_name": "InputLayer", "config": {"batch_shape": [null, 4], "dtype": "float32", "name": "i"}},
    {"module": "keras.layers", "class_name": "Dense", "config": {"name": "d", "units": 2, "activation": "relu"}}]}})";
}

TEST_F(KerasArchiveTest, HostileArchivesAreTypedErrors) {
  Sequential model({layers::Dense(2, "relu")});
  model(Tensor::zeros({1, 4}));
  model.save(file("good.keras"));
  EXPECT_NO_THROW(load_model(file("good.keras")));
  std::string good = read_bytes(file("good.keras"));

  {
    std::ofstream(file("text.keras")) << "not a zip";
  }
  expect_throw_with<FileFormatError>([&] { load_model(file("text.keras")); }, "is not a .keras archive");
  expect_throw_with<FileNotFoundError>([&] { load_model(file("absent.keras")); }, "no such file");
  expect_throw_with<ValueError>([&] { load_model(file("model.zip")); }, "must end in '.keras'");
  for (std::size_t keep : {good.size() / 3, good.size() / 2, good.size() - 30}) {
    std::ofstream(file("cut.keras"), std::ios::binary) << good.substr(0, keep);
    EXPECT_THROW(load_model(file("cut.keras")), FileFormatError) << keep;
  }
  // No weights entry; a config that is not JSON; one that nests 10,000 deep.
  write_zip(file("no_weights.keras"), {{"config.json", mlp_config()}});
  expect_throw_with<FileFormatError>([&] { load_model(file("no_weights.keras")); }, "has no model.weights.h5");
  write_zip(file("bad_json.keras"), {{"config.json", "{\"class_name\": "}});
  expect_throw_with<FileFormatError>([&] { load_model(file("bad_json.keras")); }, "not valid JSON");
  write_zip(file("deep.keras"), {{"config.json", std::string(10000, '[') + std::string(10000, ']')}});
  expect_throw_with<FileFormatError>([&] { load_model(file("deep.keras")); }, "nests deeper than 64");
  // A zip bomb: 200 MB of zeros that deflate to 200 KB.
  write_zip(file("bomb.keras"), {{"config.json", mlp_config()}, {"model.weights.h5", std::string(200u << 20, '\0')}},
            /*compress=*/true);
  expect_throw_with<FileFormatError>([&] { load_model(file("bomb.keras")); }, "refused as a zip bomb");
  // An entry whose central directory claims fewer bytes than it holds.
  write_zip(file("liar.keras"), {{"config.json", mlp_config()}});
  std::string liar = read_bytes(file("liar.keras"));
  std::size_t central = liar.find(std::string("PK\x01\x02", 4));
  ASSERT_NE(central, std::string::npos);
  liar[central + 24] = '\x10';  // uncompressed size: 16 bytes
  for (int i = 25; i < 28; ++i) liar[central + i] = '\0';
  std::ofstream(file("liar.keras"), std::ios::binary) << liar;
  EXPECT_THROW(load_model(file("liar.keras")), FileFormatError);
}

TEST_F(KerasArchiveTest, UnsupportedConfigsNameTheLayerAndTheField) {
  Sequential model({layers::Dense(2, "relu")});
  model(Tensor::zeros({1, 4}));
  model.save_weights(file("weights.h5.weights.h5"));
  std::string weights = read_bytes(file("weights.h5.weights.h5"));
  auto archive_with = [&](const std::string& dense_config) {
    return edited_archive(sequential_config(dense_config), weights);
  };
  std::string plain = archive_with(R"({"class_name": "Dense", "config": {"name": "d", "units": 2, "activation": "relu"}})");
  EXPECT_NO_THROW(load_model(plain));
  expect_throw_with<NotImplementedError>(
      [&] {
        load_model(archive_with(R"({"class_name": "Dense", "config": {"name": "d", "units": 2,
          "kernel_regularizer": {"class_name": "L2", "config": {"l2": 0.01}}}})"));
      },
      "layer 'd' (Dense): field 'kernel_regularizer' = {");
  expect_throw_with<NotImplementedError>(
      [&] { load_model(archive_with(R"({"class_name": "Dense", "config": {"name": "d", "units": 2, "sparkle": 1}})")); },
      "layer 'd' (Dense): field 'sparkle' (= 1) is not one keras-cpp knows for Dense");
  expect_throw_with<NotImplementedError>(
      [&] {
        load_model(archive_with(R"({"class_name": "Dense", "config": {"name": "d", "units": 2,
          "dtype": {"class_name": "DTypePolicy", "config": {"name": "int8_from_float32"}}}})"));
      },
      "unknown dtype policy 'int8_from_float32'");
  expect_throw_with<NotImplementedError>(
      [&] { load_model(archive_with(R"({"class_name": "Dense", "config": {"name": "d", "units": 2, "activation": "hard_silu"}})")); },
      "field 'activation' = 'hard_silu' is not an activation keras-cpp has");
  expect_throw_with<FileFormatError>(
      [&] { load_model(archive_with(R"({"class_name": "Dense", "config": {"name": "d", "units": "two"}})")); },
      "field 'units' is \"two\"; expected an integer");
  // A config that lies about sizes: 4 x 10^9 weights are never allocated.
  expect_throw_with<OutOfMemoryError>(
      [&] { load_model(archive_with(R"({"class_name": "Dense", "config": {"name": "d", "units": 1000000000}})")); },
      "more than it can need");
  expect_throw_with<NotImplementedError>(
      [&] { load_model(archive_with(R"({"class_name": "GRU", "config": {"name": "g", "units": 2}})")); },
      "layer class 'GRU' is not one keras-cpp can make from a config");
  expect_throw_with<NotImplementedError>(
      [&] {
        load_model(archive_with(R"({"class_name": "Dense", "config": {"name": "d", "units": 2,
          "kernel_initializer": {"class_name": "Orthogonal", "config": {"gain": 1.0}}}})"));
      },
      "is initializer 'orthogonal', which keras-cpp does not have");
}

// Keras 3.15 reads LossScaleOptimizer configs of earlier versions, which wrote the base
// optimizer's (non-functional) arguments at their defaults and `dynamic`: so does load_model.
// One set otherwise is refused as Keras refuses it, and the model loads uncompiled.
TEST_F(KerasArchiveTest, EarlierLossScaleOptimizerConfigsCompile) {
  Sequential model({layers::Dense(2)});
  model(Tensor::zeros({1, 4}));
  model.save_weights(file("weights.weights.h5"));
  std::string weights = read_bytes(file("weights.weights.h5"));
  auto archive_with = [&](const std::string& extra) {
    return edited_archive(
        sequential_config(R"({"class_name": "Dense", "config": {"name": "d", "units": 2}})",
                          R"("compile_config": {"loss": "mse", "optimizer": {"module": "keras.optimizers",
        "class_name": "LossScaleOptimizer", "config": {"name": "loss_scale_optimizer", "initial_scale": 256.0,
        "dynamic_growth_steps": 7, )" + extra + R"(
        "inner_optimizer": {"module": "keras.optimizers", "class_name": "SGD", "config": {"learning_rate": 0.5}}}}})"),
        weights);
  };
  std::shared_ptr<Model> earlier = load_model(archive_with(
      R"("dynamic": true, "weight_decay": null, "clipnorm": null, "global_clipnorm": null, "clipvalue": null,
         "use_ema": false, "ema_momentum": 0.99, "ema_overwrite_frequency": null, "loss_scale_factor": null,
         "gradient_accumulation_steps": null,)"));
  ASSERT_TRUE(earlier->compiled());
  EXPECT_TRUE(earlier->optimizer().scales_loss());
  EXPECT_EQ(earlier->optimizer().loss_scale(), 256.0);
  EXPECT_EQ(earlier->optimizer().loss_scale_growth_steps(), 7);
  EXPECT_EQ(earlier->optimizer().learning_rate(), 0.5);
  EXPECT_FALSE(load_model(archive_with(R"("clipnorm": 1.0,)"))->compiled());
  EXPECT_FALSE(load_model(archive_with(R"("dynamic": false,)"))->compiled());
}

}  // namespace
}  // namespace keras
