// Keras' mixed precision: dtype policies, the global policy, autocast of variables inside a
// layer's call (a layer of one's own too), float32 statistics in the normalization layers and
// in losses, policies in .keras configs, and LossScaleOptimizer's dynamic loss scaling.
#include <filesystem>

#include "tests/test_helpers.h"

namespace keras {
namespace {

using testing::expect_throw_with;

// Sets the global policy for one test and puts float32 back after it.
class MixedPrecisionTest : public ::testing::Test {
 protected:
  void TearDown() override { mixed_precision::set_global_policy("float32"); }
};

TEST_F(MixedPrecisionTest, PoliciesHaveKerasNamesAndDtypes) {
  DTypePolicy mixed("mixed_bfloat16");
  EXPECT_EQ(mixed.compute_dtype(), bfloat16);
  EXPECT_EQ(mixed.variable_dtype(), float32);
  EXPECT_EQ(DTypePolicy("mixed_float16").compute_dtype(), float16);
  EXPECT_EQ(DTypePolicy("bfloat16").variable_dtype(), bfloat16);
  EXPECT_EQ(DTypePolicy().name(), "float32");
  EXPECT_FALSE(DTypePolicy("float32").autocast().has_value());
  expect_throw_with<ValueError>([] { DTypePolicy("mixed_int8"); }, "unknown dtype policy 'mixed_int8'");
  EXPECT_EQ(mixed_precision::global_policy().name(), "float32");
}

TEST_F(MixedPrecisionTest, LayersMadeUnderAGlobalPolicyComputeInItAndKeepFloat32Variables) {
  Tensor x = testing::random_tensor({4, 6}, 1, float32);
  layers::Dense before(3);
  mixed_precision::set_global_policy("mixed_bfloat16");
  layers::Dense dense(3);
  EXPECT_EQ(before.dtype_policy().name(), "float32");  // made before: keeps its policy
  EXPECT_EQ(dense.compute_dtype(), bfloat16);
  Tensor y = dense(x);
  EXPECT_EQ(y.dtype(), bfloat16);
  ASSERT_EQ(dense.weights().size(), 2u);
  for (const Tensor& weight : dense.weights()) EXPECT_EQ(weight.dtype(), float32);
  // The numbers are the bfloat16 matmul of the rounded input and kernel, plus the rounded bias.
  Tensor kernel = dense.weights()[0], bias = dense.weights()[1];
  Tensor expected = ops::matmul(x.astype(bfloat16), kernel.detach().astype(bfloat16)) + bias.detach().astype(bfloat16);
  EXPECT_EQ(y.to_vector<double>(), expected.to_vector<double>());
  // The gradient reaches the float32 variables in float32.
  ops::sum(y).backward();
  EXPECT_EQ(kernel.grad().dtype(), float32);
  EXPECT_EQ(bias.grad().to_vector<float>(), std::vector<float>(3, 4.0f));
  expect_throw_with<ValueError>([&] { dense.set_dtype_policy(DTypePolicy("float32")); },
                                "before its first call");
}

// A layer of one's own gets autocast without doing anything: its variables are read in the
// compute dtype by every op inside its call (Keras' AutocastScope).
class ScaledProjection : public LayerOf<ScaledProjection> {
 public:
  ScaledProjection() : LayerOf("scaled_projection", "") {}
  void build(const Shape& input_shape) override {
    kernel_ = add_weight("kernel", {input_shape.back(), 2}, initializers::glorot_uniform(5));
    log_scale_ = add_weight("log_scale", {}, std::make_shared<initializers::Constant>(0.5));
  }
  Tensor call(const Tensor& inputs, bool) override {
    return ops::matmul(inputs, kernel_) * ops::exp(log_scale_);
  }

 private:
  Tensor kernel_, log_scale_;
};

TEST_F(MixedPrecisionTest, ALayerOfOnesOwnIsAutocast) {
  ScaledProjection layer;
  layer.set_dtype_policy(DTypePolicy("mixed_float16"));
  Tensor x = testing::random_tensor({3, 4}, 2, float32);
  Tensor y = layer(x);
  EXPECT_EQ(y.dtype(), float16);
  Tensor kernel = layer.weights()[0], log_scale = layer.weights()[1];
  EXPECT_EQ(kernel.dtype(), float32);
  Tensor expected = ops::matmul(x.astype(float16), kernel.detach().astype(float16)) *
                    ops::exp(log_scale.detach().astype(float16));
  EXPECT_EQ(y.to_vector<double>(), expected.to_vector<double>());
  ops::sum(y).backward();
  EXPECT_EQ(log_scale.grad().dtype(), float32);
  EXPECT_TRUE(kernel.grad().defined());
  // Outside a call nothing is autocast.
  EXPECT_EQ(ops::exp(log_scale).dtype(), float32);
}

// Only variables are autocast: a float32 activation meeting a bfloat16 one is an error, as
// for any two dtypes; MultiHeadAttention's EinsumDense sublayers take its policy.
TEST_F(MixedPrecisionTest, OnlyVariablesAreAutocastAndSublayersShareThePolicy) {
  layers::Dense dense(2);
  dense.set_dtype_policy(DTypePolicy("mixed_bfloat16"));
  Tensor x = testing::random_tensor({2, 3}, 1, float32);
  EXPECT_EQ(dense(x).dtype(), bfloat16);
  {
    AutocastScope autocast(Autocast{float32, bfloat16});
    expect_throw_with<DTypeError>([&] { ops::add(x, x.astype(bfloat16)); }, "different dtypes");
  }
  mixed_precision::set_global_policy("mixed_bfloat16");
  layers::MultiHeadAttention attention(2, 4);
  Tensor sequence = testing::random_tensor({2, 5, 8}, 2, float32);
  Tensor out = attention(sequence.astype(bfloat16));
  EXPECT_EQ(out.dtype(), bfloat16);
  for (const Tensor& weight : attention.weights()) EXPECT_EQ(weight.dtype(), float32);
  for (const LayerPtr& sublayer : attention.layers()) EXPECT_EQ(sublayer->dtype_policy().name(), "mixed_bfloat16");
}

TEST_F(MixedPrecisionTest, NormalizationStatisticsAreFloat32) {
  Tensor x = (testing::random_tensor({4, 8}, 3, float32) * 40.0 + 1000.0).astype(bfloat16);
  layers::LayerNormalization mixed;
  mixed.set_dtype_policy(DTypePolicy("mixed_bfloat16"));
  layers::LayerNormalization wide;
  Tensor y = mixed(x), reference = wide(x.astype(float32));
  EXPECT_EQ(y.dtype(), bfloat16);
  // Statistics in float32 and one rounding at the end: exactly the float32 layer's result
  // rounded (in bfloat16 the mean of values near 1000 would be off by several units).
  EXPECT_EQ(y.to_vector<double>(), reference.astype(bfloat16).to_vector<double>());
}

TEST_F(MixedPrecisionTest, AnMlpTrainsUnderMixedBfloat16WithFloat32Losses) {
  mixed_precision::set_global_policy("mixed_bfloat16");
  testing::Blobs train = testing::make_blobs(600, 11), test = testing::make_blobs(300, 12);
  Sequential model({layers::Dense(16, "relu"), layers::Dense(3)});
  model.compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true), {"accuracy"});
  History history = model.fit(train.x, train.y, {.batch_size = 32, .epochs = 8, .verbose = 0});
  EXPECT_LT(history.history["loss"].back(), history.history["loss"].front());
  EXPECT_GT(model.evaluate(test.x, test.y, {.verbose = 0})["accuracy"], 0.95);
  EXPECT_EQ(model.predict(test.x, 64).dtype(), bfloat16);
  for (const Tensor& weight : model.weights()) EXPECT_EQ(weight.dtype(), float32);
  // The loss of bfloat16 predictions is computed on their float32 values.
  Tensor logits = Tensor::from_vector(std::vector<float>{8.0f, 0.0f, 0.0f}, {1, 3}).astype(bfloat16);
  Tensor loss = losses::SparseCategoricalCrossentropy(true)(Tensor::from_vector(std::vector<std::int64_t>{0}, {1}), logits);
  EXPECT_EQ(loss.dtype(), float32);
  EXPECT_NEAR(loss.item(), std::log1p(2 * std::exp(-8.0)), 1e-7);
}

// The guide's convnet layers (Rescaling of uint8 pixels, Conv2D, BatchNormalization, pooling,
// Dropout, Dense) under mixed_bfloat16: bfloat16 activations, float32 variables and gradients.
TEST_F(MixedPrecisionTest, AConvnetRunsUnderMixedBfloat16) {
  mixed_precision::set_global_policy("mixed_bfloat16");
  Sequential model({layers::Rescaling(1.0 / 255), layers::Conv2D(4, {3, 3}), layers::BatchNormalization(),
                    layers::Activation("relu"), layers::MaxPooling2D({2, 2}), layers::Dropout(0.2),
                    layers::GlobalAveragePooling2D(), layers::Dense(3)});
  Tensor images = ops::cast(testing::random_tensor({4, 8, 8, 1}, 5, float32, 0.0, 255.0), uint8);
  Tensor labels = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 1}, {4});
  model.compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true));
  History history = model.fit(images, labels, {.batch_size = 4, .epochs = 3, .verbose = 0});
  EXPECT_TRUE(std::isfinite(history.history["loss"].back()));
  EXPECT_EQ(model.predict(images).dtype(), bfloat16);
  for (const Tensor& weight : model.weights()) EXPECT_EQ(weight.dtype(), float32);
}

TEST_F(MixedPrecisionTest, PoliciesSurviveKerasArchives) {
  mixed_precision::set_global_policy("mixed_bfloat16");
  Sequential model({layers::Dense(4, "relu"), layers::LayerNormalization(), layers::Dense(2)});
  Tensor x = testing::random_tensor({3, 5}, 4, float32);
  Tensor before = model(x);
  std::string path = (std::filesystem::temp_directory_path() / "keras_mixed_policy.keras").string();
  model.save(path);
  mixed_precision::set_global_policy("float32");
  std::shared_ptr<Model> loaded = load_model(path);
  std::filesystem::remove(path);
  EXPECT_EQ(loaded->layers()[0]->dtype_policy().name(), "mixed_bfloat16");
  Tensor after = (*loaded)(x);
  EXPECT_EQ(after.dtype(), bfloat16);
  EXPECT_EQ(after.to_vector<double>(), before.to_vector<double>());
}

TEST_F(MixedPrecisionTest, LossScaleOptimizerSkipsOverflowsAndGrowsAfterFiniteSteps) {
  optimizers::LossScaleOptimizer<optimizers::SGD> keras_defaults(optimizers::SGD(0.1));
  EXPECT_EQ(keras_defaults.loss_scale(), 32768.0);
  EXPECT_EQ(keras_defaults.loss_scale_growth_steps(), 2000);

  optimizers::LossScaleOptimizer<optimizers::SGD> optimizer(optimizers::SGD(0.5), 8.0, /*dynamic_growth_steps=*/3);
  Tensor variable = Tensor::full({2}, 1.0, float32).set_requires_grad(true);
  EXPECT_EQ(optimizer.scale_loss(Tensor::scalar(2.0)).item(), 16.0);
  // A finite (scaled) gradient is unscaled before the update: 1 - 0.5 * (8 / 8).
  optimizer.apply({variable}, {Tensor::full({2}, 8.0, float32)});
  EXPECT_EQ(variable.to_vector<float>(), (std::vector<float>{0.5f, 0.5f}));
  EXPECT_EQ(optimizer.iterations(), 1);
  // An overflow: no update, the step is not counted, the scale halves.
  optimizer.apply({variable}, {Tensor::from_vector(std::vector<float>{INFINITY, 1.0f}, {2})});
  EXPECT_EQ(variable.to_vector<float>(), (std::vector<float>{0.5f, 0.5f}));
  EXPECT_EQ(optimizer.iterations(), 1);
  EXPECT_EQ(optimizer.loss_scale(), 4.0);
  optimizer.apply({variable}, {Tensor::from_vector(std::vector<float>{NAN, 1.0f}, {2})});
  EXPECT_EQ(optimizer.loss_scale(), 2.0);
  // Three finite steps in a row double it.
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(optimizer.loss_scale(), 2.0) << step;
    optimizer.apply({variable}, {Tensor::full({2}, 2.0, float32)});
  }
  EXPECT_EQ(optimizer.loss_scale(), 4.0);
  EXPECT_EQ(optimizer.finite_steps_in_a_row(), 0);
  EXPECT_NEAR(variable.to_vector<float>()[0], 0.5 - 3 * 0.5, 1e-6);
  expect_throw_with<ValueError>([] { optimizers::LossScaleOptimizer<optimizers::SGD>(optimizers::SGD(0.1), 0.0); },
                                "initial_scale must be a finite number > 0");
}

TEST_F(MixedPrecisionTest, MixedFloat16TrainsWithLossScaling) {
  mixed_precision::set_global_policy("mixed_float16");
  testing::Blobs train = testing::make_blobs(600, 11), test = testing::make_blobs(300, 12);
  Sequential model({layers::Dense(16, "relu"), layers::Dense(3)});
  auto optimizer = optimizers::LossScaleOptimizer<optimizers::Adam>(optimizers::Adam(0.01));
  model.compile(optimizer, losses::SparseCategoricalCrossentropy(true), {"accuracy"});
  model.fit(train.x, train.y, {.batch_size = 32, .epochs = 8, .verbose = 0});
  EXPECT_GT(model.evaluate(test.x, test.y, {.verbose = 0})["accuracy"], 0.95);
}

}  // namespace
}  // namespace keras
