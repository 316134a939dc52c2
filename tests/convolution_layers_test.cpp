// The image layers on one process: Keras' weight names and shapes, output shapes, Conv2D against
// ops::conv, BatchNormalization's training and inference arithmetic and moving statistics
// (saved and loaded with the weights), the guide's convnet learning, and each bad input's
// message. The numbers against Keras 3 + JAX itself are tests/interop/check_keras_convolution.py's.
#include <cmath>
#include <cstdio>
#include <tuple>

#include "tests/test_helpers.h"

namespace keras {
namespace {

using testing::expect_close;
using testing::expect_throw_with;

TEST(Conv2D, KerasWeightsShapesAndOutput) {
  clear_session();
  layers::Conv2DOptions options;
  options.strides = {2};
  options.padding = "same";
  options.activation = "relu";
  layers::Conv2D layer(6, {3, 2}, options);
  EXPECT_EQ(layer.name(), "conv2d");
  Tensor x = testing::random_tensor({2, 7, 5, 4}, 3, float32);
  Tensor y = layer(x);
  EXPECT_EQ(y.shape(), (Shape{2, 4, 3, 6}));
  ASSERT_EQ(layer.variables().size(), 2u);
  EXPECT_EQ(layer.variables()[0]->path(), "conv2d/kernel");
  EXPECT_EQ(layer.kernel().shape(), (Shape{3, 2, 4, 6}));
  EXPECT_EQ(layer.variables()[1]->path(), "conv2d/bias");
  EXPECT_EQ(layer.output_shape(), (Shape{-1, 4, 3, 6}));
  Tensor expected = ops::relu(ops::conv(x, layer.kernel(), {2}, "same") + layer.bias());
  expect_close(y.to_vector<double>(), expected.to_vector<double>(), 1e-6, "Conv2D vs ops::conv");
  // Glorot uniform with Keras' fans for a kernel: receptive field x channels in and out.
  double limit = std::sqrt(6.0 / (3 * 2 * 4 + 3 * 2 * 6));
  for (double w : layer.kernel().to_vector<double>()) EXPECT_LE(std::abs(w), limit);
  layers::Conv2DOptions grouped;
  grouped.groups = 2;
  grouped.use_bias = false;
  layers::Conv2D split(4, {3}, grouped);
  EXPECT_EQ(split(x).shape(), (Shape{2, 5, 3, 4}));
  EXPECT_EQ(split.kernel().shape(), (Shape{3, 3, 2, 4}));
  EXPECT_EQ(split.variables().size(), 1u);
}

TEST(Pooling2D, ShapesAndValues) {
  clear_session();
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 4, 4, 1});
  layers::MaxPooling2D max_pool({2});
  expect_close(max_pool(x).to_vector<double>(), {6, 8, 14, 16}, 0, "max 2x2");
  layers::AveragePooling2D average_pool({2});
  expect_close(average_pool(x).to_vector<double>(), {3.5, 5.5, 11.5, 13.5}, 0, "average 2x2");
  // "same" with stride 1: the last row and column average what they cover (padding not counted).
  layers::AveragePooling2D same({2}, {.strides = {1}, .padding = "same", .data_format = "channels_last", .name = ""});
  Tensor pooled = same(x);
  EXPECT_EQ(pooled.shape(), (Shape{1, 4, 4, 1}));
  EXPECT_DOUBLE_EQ(pooled.to_vector<double>()[15], 16.0);
  EXPECT_DOUBLE_EQ(pooled.to_vector<double>()[3], (4.0 + 8.0) / 2);
  layers::GlobalAveragePooling2D global;
  Tensor images = testing::random_tensor({2, 3, 4, 5}, 9);
  EXPECT_EQ(global(images).shape(), (Shape{2, 5}));
  expect_close(global(images).to_vector<double>(), ops::mean(images, {1, 2}).to_vector<double>(), 1e-7, "global");
  layers::GlobalAveragePooling2D keep(true);
  EXPECT_EQ(keep(images).shape(), (Shape{2, 1, 1, 5}));
}

TEST(BatchNormalization, TrainingUsesTheBatchAndMovesTheMovingStatistics) {
  clear_session();
  layers::BatchNormalizationOptions options;
  options.momentum = 0.9;
  layers::BatchNormalization norm(options);
  Tensor x = testing::random_tensor({8, 3, 3, 2}, 11, float32, 1.0, 5.0);
  Tensor y = norm(x, /*training=*/true);
  ASSERT_EQ(norm.variables().size(), 4u);
  EXPECT_EQ(norm.variables()[0]->path(), "batch_normalization/gamma");
  EXPECT_EQ(norm.variables()[1]->path(), "batch_normalization/beta");
  EXPECT_EQ(norm.variables()[2]->path(), "batch_normalization/moving_mean");
  EXPECT_FALSE(norm.variables()[2]->trainable);
  EXPECT_EQ(norm.variables()[3]->path(), "batch_normalization/moving_variance");
  EXPECT_EQ(norm.trainable_weights().size(), 2u);
  std::vector<double> batch_mean = ops::mean(x, {0, 1, 2}).to_vector<double>();
  std::vector<double> batch_variance = ops::var(x, {0, 1, 2}).to_vector<double>();
  // Normalised with the batch's (biased) statistics and epsilon 1e-3.
  std::vector<double> in = x.to_vector<double>(), out = y.to_vector<double>();
  for (std::size_t i = 0; i < in.size(); ++i) {
    std::size_t c = i % 2;
    EXPECT_NEAR(out[i], (in[i] - batch_mean[c]) / std::sqrt(batch_variance[c] + 1e-3), 1e-5);
  }
  // moving = moving * 0.9 + batch * 0.1, from (0, 1).
  std::vector<double> mean, variance;
  for (int c = 0; c < 2; ++c) {
    mean.push_back(0.1 * batch_mean[c]);
    variance.push_back(0.9 + 0.1 * batch_variance[c]);
  }
  expect_close(norm.moving_mean().to_vector<double>(), mean, 1e-6, "moving mean");
  expect_close(norm.moving_variance().to_vector<double>(), variance, 1e-6, "moving variance");
  // Inference uses the moving statistics and leaves them alone.
  Tensor inferred = norm(x, /*training=*/false);
  std::vector<double> inferred_values = inferred.to_vector<double>();
  for (std::size_t i = 0; i < in.size(); ++i) {
    std::size_t c = i % 2;
    EXPECT_NEAR(inferred_values[i], (in[i] - mean[c]) / std::sqrt(variance[c] + 1e-3), 1e-5);
  }
  expect_close(norm.moving_mean().to_vector<double>(), mean, 1e-6, "moving mean after inference");
  // A layer set not trainable normalises with its moving statistics even in training, as Keras.
  norm.set_trainable(false);
  expect_close(norm(x, true).to_vector<double>(), inferred_values, 1e-6, "frozen");
}

TEST(BatchNormalization, GradientMatchesFiniteDifferencesOnAnotherAxis) {
  clear_session();
  layers::BatchNormalizationOptions options;
  options.axis = 1;
  Tensor x = testing::random_tensor({4, 3, 2}, 21, float32).set_requires_grad(true);
  Tensor weights = testing::random_tensor({4, 3, 2}, 22, float32);
  // A fresh layer each time (gamma 1, beta 0), in float32 as its variables are: steps of 1e-2.
  auto objective = [&](const Tensor& input) {
    layers::BatchNormalization fresh(options);
    return ops::sum(fresh(input, true) * weights);
  };
  objective(x).backward();
  std::vector<double> analytic = x.grad().to_vector<double>(), base = x.to_vector<double>();
  NoGradGuard no_grad;
  for (std::size_t j = 0; j < base.size(); ++j) {
    std::vector<double> plus = base, minus = base;
    plus[j] += 1e-2;
    minus[j] -= 1e-2;
    double numeric = (objective(Tensor::from_vector(plus, x.shape()).astype(float32)).item() -
                      objective(Tensor::from_vector(minus, x.shape()).astype(float32)).item()) / 2e-2;
    EXPECT_NEAR(analytic[j], numeric, 5e-3) << "element " << j;
  }
}

// Training runs one fused op (engine/ops/normalization.cpp) unless synchronized, which on one
// process composes the same arithmetic from the engine's ops: both give the same output,
// gradients and moving statistics, in float32 and under mixed_bfloat16 (there within two
// bfloat16 units of the output: each path rounds its float32 result once, from float32
// arithmetic done in a different order). The input spans several of the CPU kernel's blocks.
TEST(BatchNormalization, FusedTrainingEqualsTheComposedOps) {
  for (const char* policy : {"float32", "mixed_bfloat16"}) {
    clear_session();
    mixed_precision::set_global_policy(policy);
    const bool half = std::string(policy) != "float32";
    const DType compute = half ? bfloat16 : float32;
    Tensor x = (testing::random_tensor({16, 9, 9, 12}, 31, float32, -1.0, 1.0) + 3.0).astype(compute);
    Tensor weights = testing::random_tensor({16, 9, 9, 12}, 32, float32).astype(compute);
    struct Result {
      std::vector<double> out, input_gradient, gamma_gradient, beta_gradient, moving_mean, moving_variance;
    };
    auto run = [&](bool synchronized) {
      layers::BatchNormalizationOptions options;
      options.synchronized = synchronized;
      options.momentum = 0.5;
      options.gamma_initializer = initializers::he_uniform(33);
      options.beta_initializer = initializers::glorot_uniform(34);
      layers::BatchNormalization norm(options);
      Tensor input = x.clone().set_requires_grad(true);
      Tensor out = norm(input, /*training=*/true);
      EXPECT_EQ(out.dtype(), compute) << policy;
      ops::sum(ops::cast(out, float32) * ops::cast(weights, float32)).backward();
      return Result{out.to_vector<double>(),
                    input.grad().to_vector<double>(),
                    norm.trainable_weights()[0].grad().to_vector<double>(),
                    norm.trainable_weights()[1].grad().to_vector<double>(),
                    norm.moving_mean().to_vector<double>(),
                    norm.moving_variance().to_vector<double>()};
    };
    Result fused = run(false), composed = run(true);
    const double unit = half ? 1.0 / 256 : 5e-6;
    const std::string what = std::string(policy) + " ";
    expect_close(fused.out, composed.out, 2 * unit, what + "output");
    expect_close(fused.moving_mean, composed.moving_mean, 1e-5, what + "moving mean");
    expect_close(fused.moving_variance, composed.moving_variance, 1e-4, what + "moving variance");
    // Gradients sum about 1300 products a channel: relative to the largest.
    for (auto [name, a, b] : {std::tuple{"input gradient", &fused.input_gradient, &composed.input_gradient},
                              std::tuple{"gamma gradient", &fused.gamma_gradient, &composed.gamma_gradient},
                              std::tuple{"beta gradient", &fused.beta_gradient, &composed.beta_gradient}}) {
      double largest = 1.0;
      for (double value : *b) largest = std::max(largest, std::abs(value));
      expect_close(*a, *b, (half ? 4 * unit : 1e-4) * largest, what + name);
    }
  }
  mixed_precision::set_global_policy("float32");
}

// The statistics accumulate x minus the channel's first element in double: a mean 1000 times
// the spread loses nothing (float32 sums of x and x^2 would leave no correct digit of the
// variance), here against float64 arithmetic on the same values.
TEST(BatchNormalization, FusedStatisticsDoNotCancelUnderALargeMean) {
  Tensor x = testing::random_tensor({64, 5, 5, 3}, 45, float32, -1.0, 1.0) + 1000.0;
  Tensor mean, variance;
  ops::fused_batch_normalization(x, Tensor(), Tensor(), -1, 1e-3, &mean, &variance);
  Tensor wide = x.astype(float64);
  Tensor expected_mean = ops::mean(wide, {0, 1, 2});
  expect_close(mean.to_vector<double>(), expected_mean.to_vector<double>(), 1e-7, "mean");
  expect_close(variance.to_vector<double>(),
               ops::mean(ops::square(wide - expected_mean), {0, 1, 2}).to_vector<double>(), 1e-6, "variance");
}

// No rows: the statistics of nothing are NaN (NumPy's mean of nothing) and the output is empty;
// no channels: nothing at all.
TEST(BatchNormalization, FusedOnEmptyInputs) {
  Tensor mean, variance;
  Tensor out = ops::fused_batch_normalization(Tensor::zeros({0, 3}), Tensor(), Tensor(), -1, 1e-3, &mean, &variance);
  EXPECT_EQ(out.shape(), (Shape{0, 3}));
  for (double value : mean.to_vector<double>()) EXPECT_TRUE(std::isnan(value));
  for (double value : variance.to_vector<double>()) EXPECT_TRUE(std::isnan(value));
  EXPECT_EQ(ops::fused_batch_normalization(Tensor::zeros({4, 0}), Tensor(), Tensor(), -1, 1e-3).shape(), (Shape{4, 0}));
  expect_throw_with<ShapeError>(
      [] { ops::fused_batch_normalization(Tensor::zeros({4, 3}), Tensor::ones({2}), Tensor(), -1, 1e-3); },
      "gamma must have shape (3)");
  expect_throw_with<ValueError>(
      [] { ops::fused_batch_normalization(Tensor::zeros({4, 3}), Tensor(), Tensor(), -1, 0.0); },
      "epsilon must be positive and finite, got 0");
}

// The statistics and the gradient's sums run over blocks in a fixed order: the same bits on
// one thread and on two.
TEST(BatchNormalization, FusedResultsDoNotDependOnTheThreadCount) {
  Tensor x = testing::random_tensor({32, 8, 8, 12}, 41, float32);
  Tensor gamma = testing::random_tensor({12}, 42, float32), beta = testing::random_tensor({12}, 43, float32);
  Tensor weights = testing::random_tensor({32, 8, 8, 12}, 44, float32);
  const int threads = num_threads();
  std::vector<std::vector<double>> results[2];
  for (int count : {1, 2}) {
    set_num_threads(count);
    Tensor input = x.clone().set_requires_grad(true);
    Tensor mean, variance;
    Tensor out = ops::fused_batch_normalization(input, gamma, beta, -1, 1e-3, &mean, &variance);
    ops::sum(out * weights).backward();
    results[count - 1] = {out.to_vector<double>(), input.grad().to_vector<double>(), mean.to_vector<double>(),
                          variance.to_vector<double>()};
  }
  set_num_threads(threads);
  for (std::size_t k = 0; k < results[0].size(); ++k) EXPECT_EQ(results[0][k], results[1][k]) << "result " << k;
}

TEST(BatchNormalization, MovingStatisticsAreSavedAndLoaded) {
  clear_session();
  auto make = [] {
    return Sequential({layers::Conv2D(2, {3}), layers::BatchNormalization(), layers::GlobalAveragePooling2D(),
                       layers::Dense(3)},
                      "saved_convnet");
  };
  Sequential model = make();
  model.compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true));
  Tensor x = testing::random_tensor({8, 5, 5, 1}, 31);
  Tensor labels = Tensor::from_vector<std::int64_t>({0, 1, 2, 0, 1, 2, 0, 1}, {8});
  for (int step = 0; step < 3; ++step) model.train_on_batch(x, labels);
  std::string path = ::testing::TempDir() + "convnet.safetensors";
  model.save_weights(path);
  clear_session();
  Sequential restored = make();
  restored.predict(x);
  restored.load_weights(path);
  std::remove(path.c_str());
  expect_close(restored.predict(x).to_vector<double>(), model.predict(x).to_vector<double>(), 1e-7,
               "inference after loading");
  auto moving = [](Model& m) {
    for (Variable* variable : m.variables()) {
      if (variable->name == "moving_mean") return variable->value.to_vector<double>();
    }
    return std::vector<double>{};
  };
  ASSERT_FALSE(moving(model).empty());
  expect_close(moving(restored), moving(model), 0, "moving mean");
  EXPECT_NE(moving(model), (std::vector<double>{0, 0})) << "training moved the moving mean";
}

TEST(ImageLayers, ReLUAndRescaling) {
  clear_session();
  Tensor x = Tensor::from_vector<float>({-2, -0.5, 0.5, 3, 8}, {5});
  expect_close(layers::ReLU()(x).to_vector<double>(), {0, 0, 0.5, 3, 8}, 0, "relu");
  layers::ReLUOptions capped;
  capped.max_value = 6;
  capped.negative_slope = 0.1;
  capped.threshold = 1;
  expect_close(layers::ReLU(capped)(x).to_vector<double>(), {-0.3, -0.15, -0.05, 3, 6}, 1e-6, "capped leaky");
  Tensor pixels = Tensor::from_vector<std::uint8_t>({0, 51, 255}, {3});
  Tensor scaled = layers::Rescaling(1.0 / 255)(pixels);
  EXPECT_EQ(scaled.dtype(), float32);
  expect_close(scaled.to_vector<double>(), {0, 0.2, 1}, 1e-7, "rescaling");
  expect_close(layers::Rescaling(2, -1)(x).to_vector<double>(), {-5, -2, 0, 5, 15}, 0, "offset");
}

// The Keras guide's layers learn: 3 classes of 8x8 images (a bright row, column or diagonal).
TEST(ImageLayers, SmallConvnetLearnsSimplePatterns) {
  clear_session();
  set_random_seed(3);
  const std::int64_t count = 96;
  std::vector<float> pixels(count * 64, 0.0f);
  std::vector<std::int64_t> labels(count);
  for (std::int64_t n = 0; n < count; ++n) {
    labels[n] = n % 3;
    for (int i = 0; i < 8; ++i) {
      int row = labels[n] == 0 ? int(n / 3 % 8) : i, column = labels[n] == 1 ? int(n / 3 % 8) : i;
      if (labels[n] == 2) row = column = i;
      pixels[n * 64 + row * 8 + column] = 255.0f;
    }
  }
  Tensor x = Tensor::from_vector(pixels, {count, 8, 8, 1});
  Tensor y = Tensor::from_vector(labels, {count});
  layers::Conv2DOptions same;
  same.padding = "same";
  same.use_bias = false;
  // Momentum 0.9: Keras' 0.99 would leave the moving statistics near their start after the
  // 90 steps here, and evaluation uses them.
  layers::BatchNormalizationOptions fast;
  fast.momentum = 0.9;
  Sequential model({layers::Rescaling(1.0 / 255), layers::Conv2D(8, {3}, same), layers::BatchNormalization(fast),
                    layers::ReLU(), layers::MaxPooling2D({2}), layers::Conv2D(8, {3}, same),
                    layers::BatchNormalization(fast), layers::ReLU(), layers::GlobalAveragePooling2D(),
                    layers::Dense(3)});
  model.compile(optimizers::Adam(0.02), losses::SparseCategoricalCrossentropy(true), {"accuracy"});
  model.fit(x, y, {.batch_size = 32, .epochs = 30, .verbose = 0});
  EXPECT_GE(model.evaluate(x, y, {.verbose = 0})["accuracy"], 0.95);
}

TEST(ImageLayers, BadInputsAreClearErrors) {
  clear_session();
  Tensor x = Tensor::zeros({2, 5, 5, 4});
  expect_throw_with<ValueError>([&] { layers::Conv2D(2, {6})(x); },
                                "the window's height of 6 (size 6, dilation 1) is larger than the input's height of 5");
  layers::Conv2DOptions grouped;
  grouped.groups = 3;
  expect_throw_with<ValueError>([&] { layers::Conv2D(6, {3}, grouped)(x); },
                                "the input's 4 channels (shape (2, 5, 5, 4)) are not divisible by groups (3)");
  expect_throw_with<ValueError>([&] { layers::Conv2D(5, {3}, grouped); }, "filters (5) must be divisible by groups (3)");
  layers::Conv2DOptions channels_first;
  channels_first.data_format = "channels_first";
  expect_throw_with<NotImplementedError>([&] { layers::Conv2D(2, {3}, channels_first); },
                                         "data_format \"channels_first\" is not supported");
  expect_throw_with<NotImplementedError>(
      [&] { layers::MaxPooling2D({2}, {.strides = {}, .padding = "valid", .data_format = "channels_first", .name = ""}); },
      "MaxPooling2D: data_format \"channels_first\"");
  // A channels_first batch given to a layer built for channels_last.
  layers::Conv2D built(2, {3});
  built(x);
  expect_throw_with<ShapeError>([&] { built(Tensor::zeros({2, 4, 5, 5})); },
                                "was built for channels_last inputs with 4 channels, got inputs of shape (2, 4, 5, 5)");
  layers::Conv2DOptions dilated;
  dilated.strides = {2};
  dilated.dilation_rate = {2};
  expect_throw_with<ValueError>([&] { layers::Conv2D(2, {3}, dilated); }, "strides > 1 are not supported together");
  expect_throw_with<ValueError>([&] { layers::Conv2D(0, {3}); }, "filters must be a positive integer, got 0");
  layers::BatchNormalizationOptions axis;
  axis.axis = 4;
  expect_throw_with<ValueError>([&] { layers::BatchNormalization{axis}(x); },
                                "axis 4 is out of range for inputs of rank 4 (shape (2, 5, 5, 4)); expected an axis in [-4, 3]");
  axis.axis = -5;
  expect_throw_with<ValueError>([&] { layers::BatchNormalization{axis}(x); }, "axis -5 is out of range");
  layers::BatchNormalizationOptions momentum;
  momentum.momentum = 1.5;
  expect_throw_with<ValueError>([&] { layers::BatchNormalization{momentum}; }, "momentum must be in [0, 1], got 1.5");
  layers::BatchNormalization norm;
  norm(x);
  expect_throw_with<ShapeError>([&] { norm(Tensor::zeros({2, 5, 5, 3})); }, "was built for 4 features on axis 3");
}

}  // namespace
}  // namespace keras
