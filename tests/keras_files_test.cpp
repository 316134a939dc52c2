// Files written by Python Keras 3.15 on JAX (tests/reference/keras_files/, made by
// tests/interop/make_keras_files.py) load here and predict what Keras predicted, within 1e-6:
// an MLP, the guide's convnet with BatchNormalization's moving statistics, a functional model
// with two inputs and a small transformer block; with Adam's state where Keras saved it. No
// Python runs here; tests/interop/check_keras_files.py checks the other direction.
#include <cmath>
#include <cstdio>

#include "io/hdf5_file.h"
#include "tests/keras_file_models.h"
#include "tests/test_helpers.h"

namespace keras {
namespace {

std::string reference(const std::string& name) {
  return std::string(KERAS_SOURCE_DIR) + "/tests/reference/keras_files/" + name;
}

// The inputs and Keras' predictions of `name`.
struct KerasAnswer {
  std::vector<Tensor> inputs;
  Tensor predictions;
};

KerasAnswer answer_of(const std::string& name) {
  io::hdf5::File file = io::hdf5::File::open(reference(name + ".io.h5"));
  io::hdf5::Group root = file.root();
  KerasAnswer answer;
  // str(), not "x" + std::to_string(i): GCC 12 warns falsely (-Wrestrict) on that inlined.
  for (int i = 0; root.has_dataset(str("x", i)); ++i) answer.inputs.push_back(root.read_dataset(str("x", i), float32));
  answer.predictions = root.read_dataset("y", float32);
  return answer;
}

std::vector<Tensor> predict(Model& model, const std::vector<Tensor>& inputs) {
  if (inputs.size() == 1) return {model(inputs[0])};
  return model(inputs);
}

double largest_difference(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  std::vector<double> left = a.to_vector<double>(), right = b.to_vector<double>();
  double largest = 0;
  for (std::size_t i = 0; i < left.size() && i < right.size(); ++i) {
    largest = std::max(largest, std::abs(left[i] - right[i]));
  }
  return largest;
}

class KerasFilesTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { clear_session(); }
};

TEST_P(KerasFilesTest, WeightsSavedByKerasPredictAsKeras) {
  const std::string& name = GetParam();
  KerasAnswer answer = answer_of(name);
  std::shared_ptr<Model> model = testing::make_keras_file_model(name);
  model->compile(optimizers::Adam(0.01), "mse");
  model->load_weights(reference(name + ".weights.h5"));
  EXPECT_LE(largest_difference(predict(*model, answer.inputs)[0], answer.predictions), 1e-6);
  // Two steps of Adam in Keras (batches of 2 of 4 rows); the convnet's optimizer was made
  // afresh before saving. The learning rate came from the file too.
  EXPECT_EQ(model->optimizer().iterations(), name == "convnet" ? 0 : 2);
  EXPECT_NEAR(model->optimizer().learning_rate(), 0.01, 1e-9);
  if (name != "convnet") {
    EXPECT_FALSE(model->optimizer().slots_of(model->trainable_weights()[0]).empty());
  }
}

TEST_P(KerasFilesTest, ArchivesSavedByKerasLoadAndPredictAsKeras) {
  const std::string& name = GetParam();
  KerasAnswer answer = answer_of(name);
  std::shared_ptr<Model> model = load_model(reference(name + ".keras"));
  EXPECT_LE(largest_difference(predict(*model, answer.inputs)[0], answer.predictions), 1e-6);
  // Keras saved it compiled with Adam(0.01) and mse: compiled so here, with Adam's state.
  ASSERT_TRUE(model->compiled());
  EXPECT_EQ(model->optimizer().iterations(), name == "convnet" ? 0 : 2);
  EXPECT_NEAR(model->optimizer().learning_rate(), 0.01, 1e-9);
  // The same model as ours, layer for layer: the weights file of one loads into the other.
  std::shared_ptr<Model> ours = testing::make_keras_file_model(name);
  EXPECT_EQ(ours->count_params(), model->count_params());
}

TEST_P(KerasFilesTest, ArchivesSavedHereLoadHere) {
  const std::string& name = GetParam();
  KerasAnswer answer = answer_of(name);
  std::shared_ptr<Model> model = testing::make_keras_file_model(name);
  model->load_weights(reference(name + ".weights.h5"));
  std::string path = ::testing::TempDir() + "keras_files_test_" + name + ".keras";
  model->save(path);
  std::shared_ptr<Model> loaded = load_model(path);
  std::remove(path.c_str());
  EXPECT_EQ(predict(*loaded, answer.inputs)[0].to_vector<double>(),
            predict(*model, answer.inputs)[0].to_vector<double>());
  EXPECT_FALSE(loaded->compiled());  // saved uncompiled
}

// Keras' LossScaleOptimizer(Adam(0.01), initial_scale=1024, dynamic_growth_steps=3) after 4
// finite steps: the scale doubled once (2048) and one step counts toward the next doubling.
// Its weights file and archive carry that state here; ours carry it back (both ways through
// our own files here, into Keras in check_keras_files.py).
TEST(KerasFilesLossScaling, LossScaleOptimizersStateComesAlong) {
  clear_session();
  KerasAnswer answer = answer_of("mlp_loss_scaled");
  auto expect_keras_state = [&](const optimizers::Optimizer& optimizer, const std::string& from) {
    SCOPED_TRACE(from);
    EXPECT_TRUE(optimizer.scales_loss());
    EXPECT_EQ(optimizer.loss_scale(), 2048.0);
    EXPECT_EQ(optimizer.finite_steps_in_a_row(), 1);
    EXPECT_EQ(optimizer.iterations(), 4);
    EXPECT_NEAR(optimizer.learning_rate(), 0.01, 1e-9);
  };
  std::shared_ptr<Model> model = testing::make_keras_file_model("mlp");
  model->compile(optimizers::LossScaleOptimizer<optimizers::Adam>(optimizers::Adam(0.01), 1024.0, 3), "mse");
  model->load_weights(reference("mlp_loss_scaled.weights.h5"));
  EXPECT_LE(largest_difference(predict(*model, answer.inputs)[0], answer.predictions), 1e-6);
  expect_keras_state(model->optimizer(), "Keras' .weights.h5");

  std::shared_ptr<Model> archived = load_model(reference("mlp_loss_scaled.keras"));
  ASSERT_TRUE(archived->compiled());
  EXPECT_EQ(archived->optimizer().initial_loss_scale(), 1024.0);
  EXPECT_EQ(archived->optimizer().loss_scale_growth_steps(), 3);
  EXPECT_LE(largest_difference(predict(*archived, answer.inputs)[0], answer.predictions), 1e-6);
  expect_keras_state(archived->optimizer(), "Keras' .keras");

  // Ours, written and read back.
  std::string weights = ::testing::TempDir() + "keras_files_test_loss_scaled.weights.h5";
  std::string archive = ::testing::TempDir() + "keras_files_test_loss_scaled.keras";
  model->save_weights(weights);
  model->save(archive);
  std::shared_ptr<Model> again = testing::make_keras_file_model("mlp");
  again->compile(optimizers::LossScaleOptimizer<optimizers::Adam>(optimizers::Adam(0.01), 1024.0, 3), "mse");
  again->load_weights(weights);
  expect_keras_state(again->optimizer(), "our .weights.h5");
  std::shared_ptr<Model> reloaded = load_model(archive);
  expect_keras_state(reloaded->optimizer(), "our .keras");
  EXPECT_EQ(reloaded->optimizer().loss_scale_growth_steps(), 3);
  {
    // Keras writes the inner optimizer again as optimizer/inner_optimizer (its name "adam").
    io::hdf5::File ours = io::hdf5::File::open(weights);
    io::hdf5::Group inner = ours.root().group("optimizer").group("inner_optimizer").group("vars");
    EXPECT_EQ(inner.string_attribute("name"), std::optional<std::string>("adam"));
    EXPECT_EQ(inner.member_names().size(), 10u);  // iterations, learning_rate, 2 slots x 4 variables
  }
  // Into an Adam without loss scaling, the optimizer's part does not fit (Keras skips it too,
  // with a warning); the weights load. And the reverse: a plain Adam's file into a
  // LossScaleOptimizer, whatever its count of variables.
  std::shared_ptr<Model> plain = testing::make_keras_file_model("mlp");
  plain->compile(optimizers::Adam(0.01), "mse");
  plain->load_weights(weights);
  EXPECT_EQ(plain->optimizer().iterations(), 0);
  EXPECT_LE(largest_difference(predict(*plain, answer.inputs)[0], answer.predictions), 1e-6);
  std::shared_ptr<Model> scaled = testing::make_keras_file_model("mlp");
  scaled->compile(optimizers::LossScaleOptimizer<optimizers::Adam>(optimizers::Adam(0.01)), "mse");
  scaled->load_weights(reference("mlp.weights.h5"));
  EXPECT_EQ(scaled->optimizer().iterations(), 0);
  EXPECT_EQ(scaled->optimizer().loss_scale(), 32768.0);
  std::remove(weights.c_str());
  std::remove(archive.c_str());
}

// Variables that are themselves 16-bit (Keras' pure "bfloat16" and "float16" policies):
// Keras writes bfloat16 as opaque 2-byte elements tagged dtype="bfloat16" and float16 as IEEE
// halves. Its files load here bit for bit, and ours read back the same way.
TEST(KerasFilesHalfPrecision, SixteenBitVariablesLoadAsKerasWroteThem) {
  io::hdf5::File values = io::hdf5::File::open(reference("dense_half.io.h5"));
  for (const std::string policy : {"bfloat16", "float16"}) {
    SCOPED_TRACE(policy);
    clear_session();
    mixed_precision::set_global_policy(policy);
    Sequential model({layers::Dense(3)});
    model(Tensor::ones({1, 4}));
    mixed_precision::set_global_policy("float32");
    ASSERT_EQ(model.trainable_weights()[0].dtype(), dtype_from_name(policy));
    model.load_weights(reference("dense_" + policy + ".weights.h5"));
    Tensor kernel = values.root().read_dataset(policy + "_kernel", float32);
    Tensor bias = values.root().read_dataset(policy + "_bias", float32);
    EXPECT_EQ(model.trainable_weights()[0].to_vector<double>(), kernel.to_vector<double>());
    EXPECT_EQ(model.trainable_weights()[1].to_vector<double>(), bias.to_vector<double>());

    std::string path = ::testing::TempDir() + "keras_files_test_" + policy + ".weights.h5";
    model.save_weights(path);
    {
      io::hdf5::File ours = io::hdf5::File::open(path);
      io::hdf5::DatasetInfo info = ours.root().group("layers").group("dense").group("vars").dataset_info("0");
      EXPECT_EQ(info.element_bytes, 2u);
      EXPECT_EQ(info.bfloat16, policy == "bfloat16");
      // A float32 model reads the 16-bit file too (exactly: every 16-bit value is a float32).
      clear_session();
      Sequential wide({layers::Dense(3)});
      wide(Tensor::ones({1, 4}));
      wide.load_weights(path);
      EXPECT_EQ(wide.trainable_weights()[0].to_vector<double>(), kernel.to_vector<double>());
    }
    std::remove(path.c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(KerasModels, KerasFilesTest, ::testing::ValuesIn(testing::kKerasFileModels),
                         [](const auto& parameter) { return parameter.param; });

}  // namespace
}  // namespace keras
