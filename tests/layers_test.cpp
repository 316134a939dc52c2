// Layers and the trainer: Keras naming and paths, building, each layer's maths, a small
// problem that must converge, evaluate/predict, callbacks, weights round trip, bad inputs.
#include <cstdio>
#include <filesystem>

#include "tests/test_helpers.h"

namespace keras {
namespace {

using testing::expect_close;
using testing::expect_throw_with;
using testing::Blobs;
using testing::make_blobs;

class LayersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clear_session();
    set_random_seed(1);
  }
};

TEST_F(LayersTest, NamesAndPathsFollowKeras) {
  Sequential model({layers::Dense(4, "relu"), layers::Dense(2)});
  model(Tensor::zeros({1, 3}));
  std::vector<std::string> paths;
  for (Variable* variable : model.variables()) paths.push_back(variable->path());
  EXPECT_EQ(paths, (std::vector<std::string>{"sequential/dense/kernel", "sequential/dense/bias",
                                             "sequential/dense_1/kernel",
                                             "sequential/dense_1/bias"}));
  EXPECT_EQ(model.count_params(), 3 * 4 + 4 + 4 * 2 + 2);
  layers::DenseOptions options;
  options.name = "head";
  Sequential second({layers::Dense(1, "", options)});
  EXPECT_EQ(second.name(), "sequential_1");
  second(Tensor::zeros({1, 2}));
  EXPECT_EQ(second.variables()[0]->path(), "sequential_1/head/kernel");
}

class TwoTowers : public Model {
 public:
  TwoTowers() : Model("two_towers") {
    left_ = add_layer(layers::Dense(3, "tanh"));
    right_ = add_layer(layers::Dense(3, "sigmoid"));
    head_ = add_layer(layers::Dense(1));
  }
  Tensor call(const Tensor& inputs, bool training) override {
    return (*head_)((*left_)(inputs, training) * (*right_)(inputs, training), training);
  }

 private:
  std::shared_ptr<layers::Dense> left_, right_, head_;
};

TEST_F(LayersTest, SubclassedModelsTrackTheirLayersAndTrain) {
  TwoTowers model;
  Tensor x = testing::random_tensor({64, 2}, 5, float32);
  Tensor y = ops::sum(x * x, {1}, true);
  model.compile(optimizers::Adam(0.05), "mse");
  double first = model.evaluate(x, y, {.batch_size = 64, .verbose = 0})["loss"];
  model.fit(x, y, {.batch_size = 16, .epochs = 60, .verbose = 0});
  double last = model.evaluate(x, y, {.batch_size = 64, .verbose = 0})["loss"];
  EXPECT_LT(last, first * 0.2);
  EXPECT_EQ(model.variables()[0]->path(), "two_towers/dense/kernel");
  EXPECT_EQ(model.trainable_weights().size(), 6u);
}

TEST_F(LayersTest, DenseComputesXKernelPlusBias) {
  layers::DenseOptions options;
  options.kernel_initializer = initializers::ones();
  options.bias_initializer = std::make_shared<initializers::Constant>(-1.0);
  layers::Dense dense(2, "relu", options);
  Tensor out = dense(Tensor::from_vector<float>({1, 2, -3, -1}, {2, 2}));
  std::vector<double> expected = {2, 2, 0, 0};
  expect_close(out.to_vector<double>(), expected, 0, "dense");
  expect_throw_with<ShapeError>([&] { dense(Tensor::zeros({2, 5})); }, "last dimension is 2");
  expect_throw_with<ValueError>([] { layers::Dense(0); }, "units");
  expect_throw_with<ValueError>([] { layers::Dense(3, "swishy"); }, "unknown activation");
}

// keras.layers.PReLU: x where x > 0, alpha * x elsewhere, alpha per element of a sample (or
// shared along shared_axes), zeros by default; named p_re_lu as Keras names it.
TEST_F(LayersTest, PReLUScalesTheNegativePartByItsAlpha) {
  layers::PReLUOptions options;
  options.alpha_initializer = std::make_shared<initializers::Constant>(0.25);
  layers::PReLU prelu(options);
  Tensor out = prelu(Tensor::from_vector<float>({1, -2, -4, 3}, {2, 2}));
  expect_close(out.to_vector<double>(), std::vector<double>{1, -0.5, -1, 3}, 1e-7, "prelu");
  EXPECT_EQ(prelu.alpha().shape(), (Shape{2}));
  EXPECT_EQ(prelu.name(), "p_re_lu");
  layers::PReLU shared({.alpha_initializer = nullptr, .shared_axes = {1, 2}});
  shared(Tensor::zeros({2, 3, 4, 5}));
  EXPECT_EQ(shared.alpha().shape(), (Shape{1, 1, 5}));
  EXPECT_EQ(shared.alpha().to_vector<double>(), std::vector<double>(5, 0.0)) << "Keras' default: zeros";
  expect_throw_with<ValueError>([] { layers::PReLU({.shared_axes = {3}})(Tensor::zeros({2, 3})); },
                                "shared axis 3 is out of range");
  expect_throw_with<ShapeError>([&] { prelu(Tensor::zeros({2, 2, 2})); }, "built for inputs of rank 2");
}

TEST_F(LayersTest, EmbeddingFlattenReshapeActivation) {
  layers::Embedding embedding(5, 2, initializers::get("glorot_uniform"));
  Tensor rows = embedding(Tensor::from_vector<std::int64_t>({4, 0, 4}, {3}));
  Tensor table = embedding.embeddings();
  expect_close(rows.to_vector<double>(),
               ops::take(table, Tensor::from_vector<std::int64_t>({4, 0, 4}, {3}), 0).to_vector<double>(),
               0, "embedding");
  expect_throw_with<DTypeError>([&] { embedding(Tensor::zeros({2})); }, "int32 or int64");
  expect_throw_with<ValueError>([&] { embedding(Tensor::from_vector<std::int64_t>({5}, {1})); },
                                "out of range");
  EXPECT_EQ(layers::Flatten()(Tensor::zeros({4, 2, 3})).shape(), (Shape{4, 6}));
  EXPECT_EQ(layers::Reshape({3, -1})(Tensor::zeros({4, 6})).shape(), (Shape{4, 3, 2}));
  expect_close(layers::Activation("relu")(Tensor::from_vector<float>({-1, 2}, {2})).to_vector<double>(),
               {0, 2}, 0, "activation");
}

TEST_F(LayersTest, DropoutScalesKeptUnitsAndIsIdentityInInference) {
  layers::Dropout dropout(0.25, 9);
  Tensor x = Tensor::ones({200, 100});
  EXPECT_EQ(dropout(x, false).to_vector<double>(), x.to_vector<double>());
  std::vector<double> values = dropout(x, true).to_vector<double>();
  double kept = 0;
  for (double v : values) {
    ASSERT_TRUE(v == 0.0 || std::abs(v - 1 / 0.75) < 1e-6);
    kept += v != 0.0;
  }
  EXPECT_NEAR(kept / double(values.size()), 0.75, 0.01);
  expect_throw_with<ValueError>([] { layers::Dropout(1.0); }, "rate");
}

TEST_F(LayersTest, LayerNormalizationNormalisesTheLastAxis) {
  layers::LayerNormalization norm(1e-6);
  Tensor x = testing::random_tensor({4, 8}, 3, float64, -5, 5);
  Tensor y = norm(x);
  expect_close(ops::mean(y, {-1}).to_vector<double>(), {0, 0, 0, 0}, 1e-6, "mean");
  expect_close(ops::var(y, {-1}).to_vector<double>(), {1, 1, 1, 1}, 1e-4, "variance");
  EXPECT_EQ(norm.variables().size(), 2u);
}

// Under mixed_bfloat16 a bfloat16 input takes the fused op (engine/ops/normalization.cpp), which
// reads it as it is; the same values as a float32 input take the composed ops on a float32
// copy. Both normalise the same float32 values and round once: the outputs agree within two
// bfloat16 units, the gradients within four units of their largest element. And gamma's
// gradient, a sum over 2048 lines in fixed blocks, is the same on one thread and on two.
TEST_F(LayersTest, LayerNormalizationFusedEqualsTheComposedOps) {
  mixed_precision::set_global_policy("mixed_bfloat16");
  Tensor values = testing::random_tensor({16, 128, 24}, 5, float32, -3.0, 3.0).astype(bfloat16).astype(float32);
  Tensor weights = testing::random_tensor({16, 128, 24}, 6, float32);
  auto run = [&](DType input_dtype, int threads) {
    set_num_threads(threads);
    clear_session();
    layers::LayerNormalization norm;
    Tensor input = values.astype(input_dtype).set_requires_grad(true);
    Tensor out = norm(input);
    EXPECT_EQ(out.dtype(), bfloat16);
    ops::sum(ops::cast(out, float32) * weights).backward();
    return std::vector<std::vector<double>>{out.to_vector<double>(), input.grad().to_vector<double>(),
                                            norm.trainable_weights()[0].grad().to_vector<double>(),
                                            norm.trainable_weights()[1].grad().to_vector<double>()};
  };
  const int threads = num_threads();
  auto fused = run(bfloat16, 1), fused_two_threads = run(bfloat16, 2), composed = run(float32, 1);
  set_num_threads(threads);
  mixed_precision::set_global_policy("float32");
  const char* names[] = {"output", "input gradient", "gamma gradient", "beta gradient"};
  for (std::size_t k = 0; k < fused.size(); ++k) {
    double largest = 1.0;
    for (double value : composed[k]) largest = std::max(largest, std::abs(value));
    expect_close(fused[k], composed[k], (k == 0 ? 2.0 : 4.0) / 256 * largest, names[k]);
    EXPECT_EQ(fused[k], fused_two_threads[k]) << names[k] << " on two threads";
  }
}

// A linearly separable 3-class problem that a small MLP must learn.
TEST_F(LayersTest, FitConvergesAndReportsKerasLogs) {
  Blobs train = make_blobs(600, 11), test = make_blobs(300, 12);
  Sequential model({layers::Dense(16, "relu"), layers::Dense(3)});
  model.compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true), {"accuracy"});
  History history = model.fit(train.x, train.y,
                              {.batch_size = 32, .epochs = 8, .validation_data = {test.x, test.y},
                               .verbose = 0});
  ASSERT_EQ(history.epoch.size(), 8u);
  for (const char* key : {"loss", "accuracy", "val_loss", "val_accuracy"}) {
    ASSERT_EQ(history.history[key].size(), 8u) << key;
  }
  EXPECT_LT(history.history["loss"].back(), history.history["loss"].front());
  EXPECT_GT(history.history["val_accuracy"].back(), 0.95);
  auto results = model.evaluate(test.x, test.y, {.verbose = 0});
  EXPECT_NEAR(results["accuracy"], history.history["val_accuracy"].back(), 1e-12);
  Tensor predictions = model.predict(test.x, 64);
  EXPECT_EQ(predictions.shape(), (Shape{300, 3}));
  double agree = ops::mean(ops::cast(ops::equal(ops::argmax(predictions), test.y), float64)).item();
  EXPECT_NEAR(agree, results["accuracy"], 1e-12);
}

TEST_F(LayersTest, TrainingIsReproducibleWithASeed) {
  auto train_once = [] {
    clear_session();
    set_random_seed(5);
    Blobs data = make_blobs(128, 3);
    Sequential model({layers::Dense(8, "relu"), layers::Dropout(0.1), layers::Dense(3)});
    model.compile(optimizers::SGD(0.1, 0.9), losses::SparseCategoricalCrossentropy(true));
    model.fit(data.x, data.y, {.batch_size = 16, .epochs = 2, .verbose = 0});
    return model.weights()[0].to_vector<double>();
  };
  EXPECT_EQ(train_once(), train_once());
}

TEST_F(LayersTest, TrainerRejectsBadArguments) {
  Sequential model({layers::Dense(3)});
  Tensor x = Tensor::zeros({10, 2});
  Tensor y = Tensor::zeros({10}, int64);
  expect_throw_with<ValueError>([&] { model.fit(x, y); }, "must be compiled first");
  expect_throw_with<ValueError>([&] { model.compile("adam", "focal_nonsense"); }, "unknown loss");
  expect_throw_with<ValueError>([&] { model.compile("adam", "mse", {"precision_at_magic"}); },
                                "unknown metric");
  model.compile("adam", "sparse_categorical_crossentropy", {"accuracy"});
  expect_throw_with<ShapeError>([&] { model.fit(x, Tensor::zeros({9}, int64)); }, "10 samples but y has 9");
  expect_throw_with<ValueError>([&] { model.fit(x, y, {.batch_size = 0}); }, "batch_size");
  expect_throw_with<DTypeError>([&] { model.fit(x, Tensor::zeros({10}), {.verbose = 0}); },
                                "labels must be integer class indices");
}

TEST_F(LayersTest, VerboseFollowsKerasAndTheProgressFlag) {
  expect_throw_with<ValueError>([] { Verbose(3); }, "verbose must be \"auto\", 0, 1 or 2, got 3");
  expect_throw_with<ValueError>([] { Verbose("loud"); }, "got \"loud\"");
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(Verbose("auto").resolve(file), 2);  // not a terminal: one line per epoch
  EXPECT_EQ(Verbose(1).resolve(file), 1);       // explicit levels stand
  ::setenv("KERAS_PROGRESS", "bar", 1);
  EXPECT_EQ(Verbose("auto").resolve(file), 1);
  ::setenv("KERAS_PROGRESS", "sometimes", 1);
  expect_throw_with<ValueError>([&] { Verbose("auto").resolve(file); },
                                "KERAS_PROGRESS='sometimes' is not one of auto, bar or lines");
  expect_throw_with<ValueError>([&] { Verbose(2).resolve(file); }, "KERAS_PROGRESS='sometimes'");
  ::unsetenv("KERAS_PROGRESS");
  std::fclose(file);
}

class WeightsTest : public LayersTest {
 protected:
  void SetUp() override {
    LayersTest::SetUp();
    directory_ = std::filesystem::temp_directory_path() /
                 ("keras_weights_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }
  std::string file(const std::string& name) const { return (directory_ / name).string(); }
  std::filesystem::path directory_;
};

TEST_F(WeightsTest, SaveLoadRoundTripAndRefusals) {
  Sequential model({layers::Dense(4, "relu"), layers::Dense(2)});
  Tensor x = testing::random_tensor({3, 5}, 1, float32);
  Tensor before = model(x);
  model.save_weights(file("model.safetensors"));

  clear_session();
  Sequential other({layers::Dense(4, "relu"), layers::Dense(2)});
  other(x);
  EXPECT_NE(other(x).to_vector<double>(), before.to_vector<double>());
  other.load_weights(file("model.safetensors"));
  EXPECT_EQ(other(x).to_vector<double>(), before.to_vector<double>());

  clear_session();
  Sequential wrong_shape({layers::Dense(5, "relu"), layers::Dense(2)});
  wrong_shape(x);
  expect_throw_with<ShapeError>([&] { wrong_shape.load_weights(file("model.safetensors")); },
                                "sequential/dense/kernel");
  clear_session();
  Sequential missing({layers::Dense(4, "relu"), layers::Dense(2), layers::Dense(1)});
  missing(x);
  expect_throw_with<ValueError>([&] { missing.load_weights(file("model.safetensors")); },
                                "has no weight 'layers/dense_2/vars/0', which model 'sequential' needs (for variable 'sequential/dense_2/kernel')");
  expect_throw_with<ValueError>([&] { model.save_weights(file("model.h5")); }, ".safetensors");
  Sequential unbuilt({layers::Dense(1)});
  expect_throw_with<ValueError>([&] { unbuilt.load_weights(file("model.safetensors")); },
                                "not been built");
  {
    std::FILE* corrupt = std::fopen(file("corrupt.safetensors").c_str(), "wb");
    std::fputs("not a safetensors file", corrupt);
    std::fclose(corrupt);
  }
  EXPECT_THROW(other.load_weights(file("corrupt.safetensors")), FileFormatError);
}

TEST_F(WeightsTest, EarlyStoppingAndModelCheckpoint) {
  Blobs train = make_blobs(200, 21);
  Sequential model({layers::Dense(8, "relu"), layers::Dense(3)});
  // A learning rate of zero never improves val_loss, so patience 2 stops at epoch 3.
  model.compile(optimizers::SGD(0.0), losses::SparseCategoricalCrossentropy(true), {"accuracy"});
  auto stopper = std::make_shared<EarlyStopping>(EarlyStopping::Options{.monitor = "val_loss", .patience = 2});
  auto checkpoint = std::make_shared<ModelCheckpoint>(file("epoch_{epoch:02d}.safetensors"));
  History history = model.fit(train.x, train.y,
                              {.batch_size = 50, .epochs = 10, .validation_data = {train.x, train.y},
                               .callbacks = {stopper, checkpoint}, .verbose = 0});
  EXPECT_EQ(history.epoch.size(), 3u);
  EXPECT_EQ(stopper->stopped_epoch(), 2);
  for (const char* name : {"epoch_01.safetensors", "epoch_02.safetensors", "epoch_03.safetensors"}) {
    EXPECT_TRUE(std::filesystem::exists(file(name))) << name;
  }
  EXPECT_FALSE(std::filesystem::exists(file("epoch_04.safetensors")));
  auto bad_monitor = std::make_shared<EarlyStopping>(EarlyStopping::Options{.monitor = "val_auc_typo"});
  expect_throw_with<ValueError>(
      [&] { model.fit(train.x, train.y, {.epochs = 1, .callbacks = {bad_monitor}, .verbose = 0}); },
      "not in the logs");
  expect_throw_with<ValueError>([] { ModelCheckpoint("weights.h5"); }, ".safetensors");
}

// A ModelParallel mesh of more devices than processes used to train unsharded without a word.
TEST_F(LayersTest, ShardedLayoutOnAMeshLargerThanTheJobIsAnError) {
  namespace kd = keras::distribution;
  auto mesh = std::make_shared<kd::DeviceMesh>(std::vector<std::int64_t>{1, 2},
                                               std::vector<std::string>{"batch", "model"},
                                               std::vector<std::string>{"cpu:0", "cpu:1"});
  auto layout_map = std::make_shared<kd::LayoutMap>(mesh);
  (*layout_map)[".*dense.*kernel"] = kd::TensorLayout({std::nullopt, "model"});
  kd::set_distribution(std::make_shared<kd::ModelParallel>(layout_map));
  Sequential model({layers::Dense(4)});
  expect_throw_with<ValueError>([&] { model(Tensor::zeros({2, 3})); },
                                "over a mesh of 2 devices, but this job has 1 process;");
  // With only replicated layouts the variables could be made, but the trainer refuses to run
  // the mesh as if it were one device.
  auto replicated_map = std::make_shared<kd::LayoutMap>(mesh);
  kd::set_distribution(std::make_shared<kd::ModelParallel>(replicated_map));
  Sequential unsharded({layers::Dense(4)});
  unsharded.compile("sgd", "mse");
  expect_throw_with<ValueError>([&] { unsharded.fit(Tensor::zeros({2, 3}), Tensor::zeros({2, 4}), {.verbose = 0}); },
                                "has 2 devices but this job has 1 process");
  kd::set_distribution(nullptr);
}

}  // namespace
}  // namespace keras
