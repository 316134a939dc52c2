// The model-parallel table's convolution rows: a small convnet over (6, 6, 3) images, its
// Conv2D kernels split by output channels and the next one's by input channels (the conv
// column/row pair), the ModelParallel docstring's ".*conv2d.*kernel" rule as written, and
// BatchNormalization synchronized over the batch axis (alone, as DataParallel would run it,
// and inside the channel-split pair). Each row trains 5 Adam steps on one process and under
// ModelParallel and must give the same losses and weights, the moving statistics included
// (model_parallel_tests.cpp). Then the per-process (unsynchronized) statistics under
// DataParallel, and the bad inputs.
#include <gtest/gtest.h>

#include <cstdio>

#include "distribution/sharding/sharded_tensor.h"
#include "tests/mpi/model_parallel_table.h"
#include "tests/test_helpers.h"

namespace keras::model_parallel_table {
namespace {

layers::Conv2DOptions conv(const std::string& name, const std::string& padding, std::int64_t stride,
                           const std::string& activation = "") {
  layers::Conv2DOptions options;
  options.name = name;
  options.padding = padding;
  options.strides = {stride};
  options.activation = activation;
  return options;
}

layers::BatchNormalizationOptions batch_norm(const std::string& name, bool synchronized) {
  layers::BatchNormalizationOptions options;
  options.name = name;
  options.synchronized = synchronized;
  options.momentum = 0.5;  // the moving statistics move visibly in 5 steps
  return options;
}

// conv_a (8 filters, 3x3 "same", relu) -> [batch norm] -> conv_b (8 filters, 3x3 stride 2
// "valid") -> global average pooling -> head (4 logits).
std::shared_ptr<Model> conv_pair(bool with_batch_norm) {
  std::vector<AnyLayer> stack = {layers::Conv2D(8, {3}, conv("conv_a", "same", 1, "relu"))};
  if (with_batch_norm) stack.push_back(layers::BatchNormalization(batch_norm("norm", true)));
  stack.push_back(layers::Conv2D(8, {3}, conv("conv_b", "valid", 2)));
  stack.push_back(layers::GlobalAveragePooling2D());
  stack.push_back(layers::Dense(4, "", named("head")));
  return std::make_shared<Sequential>(stack, "convnet");
}

// The Keras guide's shape in small: convolutions with synchronized BatchNormalization and ReLU.
// No biases before the normalisations (as the guide has none there): a bias the batch mean
// then removes has a gradient of exactly zero, and Adam turns its rounding noise into full
// steps that differ with the order of the sums.
std::shared_ptr<Model> normalized_convnet() {
  layers::Conv2DOptions first = conv("conv2d", "same", 1), second = conv("conv2d_1", "valid", 2);
  first.use_bias = false;
  second.use_bias = false;
  return std::make_shared<Sequential>(
      std::vector<AnyLayer>{layers::Rescaling(0.5), layers::Conv2D(4, {3}, first),
                            layers::BatchNormalization(batch_norm("norm_a", true)), layers::ReLU(),
                            layers::Conv2D(8, {2}, second),
                            layers::BatchNormalization(batch_norm("norm_b", true)), layers::ReLU(),
                            layers::GlobalAveragePooling2D(), layers::Dense(4, "", named("head"))},
      "guide");
}

// ModelParallel's docstring model: convolutions, pooling, a dense head.
std::shared_ptr<Model> docstring_convnet() {
  return std::make_shared<Sequential>(
      std::vector<AnyLayer>{layers::Conv2D(8, {3}, conv("conv2d", "same", 1, "relu")), layers::MaxPooling2D({2}),
                            layers::Conv2D(8, {2}, conv("conv2d_1", "same", 1, "relu")),
                            layers::AveragePooling2D({2}, {.strides = {1}, .padding = "same", .data_format = "channels_last", .name = ""}),
                            layers::Flatten("flatten"), layers::Dense(4, "", named("dense"))},
      "docstring");
}

kd::DeviceMesh batch_axis_only(int processes) { return kd::DeviceMesh({processes, 1}, {"batch", "model"}); }

}  // namespace

std::vector<Case> convolution_cases() {
  const Shape images{6, 6, 3};
  auto pair = [](kd::LayoutMap& map) {
    map[".*conv_a/kernel"] = {std::nullopt, std::nullopt, std::nullopt, "model"};
    map[".*conv_a/bias"] = {"model"};
    map[".*conv_b/kernel"] = {std::nullopt, std::nullopt, "model", std::nullopt};
  };
  return {
      {"conv_pair_split_by_channels", model_axis, pair, [] { return conv_pair(false); }, false, "", images},
      {"conv_pair_on_a_batch_by_model_mesh", batch_by_model, pair, [] { return conv_pair(false); }, false, "",
       images},
      {"conv_pair_with_synchronized_batch_norm_between", batch_by_model, pair, [] { return conv_pair(true); },
       false, "", images},
      {"keras_docstring_conv2d_kernel_rule", batch_by_model,
       [](kd::LayoutMap& map) {
         map[".*conv2d.*kernel"] = {std::nullopt, std::nullopt, std::nullopt, "model"};
         map[".*dense.*kernel"] = {"model", std::nullopt};
       },
       docstring_convnet, false, "", images},
      {"synchronized_batch_norm_data_parallel", batch_axis_only, [](kd::LayoutMap&) {}, normalized_convnet,
       false, "", images},
      {"synchronized_batch_norm_with_kernels_split", batch_by_model,
       [](kd::LayoutMap& map) { map[".*conv2d_1/kernel"] = {std::nullopt, std::nullopt, std::nullopt, "model"}; },
       normalized_convnet, false, "", images},
  };
}

namespace {

// Unsynchronized BatchNormalization under DataParallel: each process normalises with its own
// rows' statistics (as Keras' replicas do), and every process moves its moving statistics by
// the same row-weighted mean of all processes' statistics.
TEST(ConvolutionParallel, UnsynchronizedBatchNormUsesEachProcesssRowsAndSharesMovingStatistics) {
  clear_session();
  kd::set_distribution(std::make_shared<kd::DataParallel>());
  const int processes = size(), rank = kd::process_id();
  // Rows of different scale on each process, so that per-process statistics differ.
  Tensor local = ops::random({RandomDistribution::normal, 0, 1, 50u + unsigned(rank)}, {4, 3, 3, 2}) * double(rank + 1) +
                 double(rank);
  layers::BatchNormalization norm(batch_norm("norm", false));
  Tensor out = norm(local, /*training=*/true);
  // On this process's rows alone: mean 0, variance ~1 per channel.
  Tensor mean = ops::mean(out, {0, 1, 2});
  Tensor variance = ops::var(out, {0, 1, 2});
  testing::expect_close(mean.to_vector<double>(), {0, 0}, 1e-5, "per-process mean");
  for (double v : variance.to_vector<double>()) EXPECT_NEAR(v, 1.0, 1e-2);
  // The moving mean is 0.5 * 0 + 0.5 * (the mean over processes of their batch means).
  std::vector<double> own = ops::mean(local, {0, 1, 2}).to_vector<double>();
  std::vector<double> expected = own;
  kd::world().all_reduce(expected.data(), static_cast<std::int64_t>(expected.size()), float64,
                         kd::ReduceOperation::sum);
  for (double& e : expected) e = 0.5 * e / processes;
  testing::expect_close(norm.moving_mean().to_vector<double>(), expected, 1e-5, "moving mean");
  kd::set_distribution(nullptr);
}

// The moving statistics are replicated variables: saved whole from a data-parallel run (where
// every process holds the same ones), they load on one process and on a mesh that splits the
// convolutions, which then predict what the trained model predicts.
TEST(ConvolutionParallel, MovingStatisticsSavedUnderDataParallelLoadOnAnyMesh) {
  const std::string path = "/tmp/keras_convnet_weights_" + std::to_string(size()) + ".safetensors";
  Tensor x = ops::random({RandomDistribution::normal, 0, 1, 61}, {kBatch, 6, 6, 3});
  Tensor y = ops::cast(ops::random({RandomDistribution::uniform, 0, 4, 62}, {kBatch}, float64), int64);
  auto make = [] {
    std::vector<AnyLayer> stack = {layers::Conv2D(8, {3}, conv("conv_a", "same", 1, "relu")),
                                   layers::BatchNormalization(batch_norm("norm", false)),
                                   layers::Conv2D(8, {3}, conv("conv_b", "valid", 2)), layers::GlobalAveragePooling2D(),
                                   layers::Dense(4, "", named("head"))};
    return std::make_shared<Sequential>(stack, "convnet");
  };
  clear_session();
  set_random_seed(3);
  kd::set_distribution(std::make_shared<kd::DataParallel>());
  std::shared_ptr<Model> trained = make();
  trained->compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true));
  for (int step = 0; step < 3; ++step) trained->train_on_batch(x, y);
  std::vector<double> expected = trained->predict(x).to_vector<double>();
  trained->save_weights(path);
  kd::set_distribution(nullptr);
  auto predictions_after_loading = [&](std::shared_ptr<kd::Distribution> distribution) {
    clear_session();
    set_random_seed(99);  // other initial values: the loaded ones must replace them
    kd::set_distribution(std::move(distribution));
    std::shared_ptr<Model> loaded = make();
    loaded->predict(x);  // builds it
    loaded->load_weights(path);
    std::vector<double> predictions = loaded->predict(x).to_vector<double>();
    kd::set_distribution(nullptr);
    return predictions;
  };
  testing::expect_close(predictions_after_loading(nullptr), expected, 1e-5, "one process");
  auto map = std::make_shared<kd::LayoutMap>(batch_by_model(size()));
  (*map)[".*conv_a/kernel"] = {std::nullopt, std::nullopt, std::nullopt, "model"};
  (*map)[".*conv_b/kernel"] = {std::nullopt, std::nullopt, "model", std::nullopt};
  testing::expect_close(predictions_after_loading(std::make_shared<kd::ModelParallel>(map)), expected, 1e-5,
                        "a batch x model mesh with the convolutions split");
  kd::world().barrier();
  if (kd::process_id() == 0) std::remove(path.c_str());
}

TEST(ConvolutionParallelErrors, FiltersTheModelAxisDoesNotDivideAreNamed) {
  clear_session();
  auto map = std::make_shared<kd::LayoutMap>(model_axis(size()));
  (*map)[".*conv2d/kernel"] = {std::nullopt, std::nullopt, std::nullopt, "model"};
  kd::set_distribution(std::make_shared<kd::ModelParallel>(map));
  testing::expect_throw_with<ValueError>(
      [&] {
        layers::Conv2D layer(3, {3});  // 3 filters over 2 or 4 processes
        layer(Tensor::zeros({kBatch, 5, 5, 2}));
      },
      "conv2d/kernel");
  kd::set_distribution(nullptr);
}

}  // namespace
}  // namespace keras::model_parallel_table
