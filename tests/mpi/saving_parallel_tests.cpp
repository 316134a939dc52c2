// Keras' own files under a distribution: a model Python Keras saved (.keras and .weights.h5,
// tests/reference/keras_files) loads onto a (2, P/2) mesh under ModelParallel with a LayoutMap
// that splits its kernels, each process reading only its blocks, and predicts what Keras
// predicted on one process; saved again from the mesh (collective: gathered, process 0
// writes), it loads on one process and predicts the same. Runs under mpirun -np 2 and -np 4
// and in the Gloo job, as the rest of keras_mpi_tests.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "io/hdf5_file.h"
#include "keras.h"
#include "tests/keras_file_models.h"

namespace keras {
namespace {

namespace kd = keras::distribution;

std::string reference(const std::string& name) {
  return std::string(KERAS_SOURCE_DIR) + "/tests/reference/keras_files/" + name;
}

// Splits the transformer block's feed-forward by columns then rows, and its attention by heads,
// under the names Keras gave its layers (tests/reference/keras_files/transformer_block.keras).
std::shared_ptr<kd::ModelParallel> transformer_map() {
  kd::DeviceMesh mesh({2, kd::num_processes() / 2}, {"batch", "model"});
  auto map = std::make_shared<kd::LayoutMap>(mesh);
  (*map)[".*dense_6/kernel"] = {std::nullopt, "model"};
  (*map)[".*dense_6/bias"] = {"model"};
  (*map)[".*dense_7/kernel"] = {"model", std::nullopt};
  (*map)[".*(query|key|value)/kernel"] = {std::nullopt, "model", std::nullopt};
  (*map)[".*(query|key|value)/bias"] = {"model", std::nullopt};
  (*map)[".*attention_output/kernel"] = {"model", std::nullopt, std::nullopt};
  return std::make_shared<kd::ModelParallel>(map);
}

struct Answer {
  Tensor x, y;
};

Answer keras_answer() {
  io::hdf5::File file = io::hdf5::File::open(reference("transformer_block.io.h5"));
  io::hdf5::Group root = file.root();
  return {root.read_dataset("x0", float32), root.read_dataset("y", float32)};
}

double largest_difference(const Tensor& a, const Tensor& b) {
  std::vector<double> left = a.to_vector<double>(), right = b.to_vector<double>();
  EXPECT_EQ(left.size(), right.size());
  double largest = 0;
  for (std::size_t i = 0; i < left.size() && i < right.size(); ++i) largest = std::max(largest, std::abs(left[i] - right[i]));
  return largest;
}

// How many of the model's variables this process holds only a block of.
int sharded_variables(Model& model) {
  int count = 0;
  for (Variable* variable : model.variables()) count += variable->sharded() ? 1 : 0;
  return count;
}

TEST(KerasFilesOnAMesh, KerasArchiveLoadsSplitAndPredictsAsKerasOnOneProcess) {
  if (kd::num_processes() % 2 != 0) GTEST_SKIP() << "needs an even number of processes";
  Answer answer = keras_answer();
  clear_session();
  kd::set_distribution(transformer_map());
  std::shared_ptr<Model> model = load_model(reference("transformer_block.keras"));
  // Feed-forward (3) and attention (4 kernels, 3 biases) variables are laid out by the map
  // (split in two on 4 processes; on 2 the model axis has one process and each block is whole).
  EXPECT_EQ(sharded_variables(*model), 10);
  EXPECT_LE(largest_difference(model->predict(answer.x), answer.y), 1e-6);

  // The weights file alone, into a model built here under the same distribution (its
  // attention split by heads; its Dense layers have other names here, so stay whole).
  std::shared_ptr<Model> built = testing::make_keras_file_model("transformer_block");
  built->load_weights(reference("transformer_block.weights.h5"));
  EXPECT_EQ(sharded_variables(*built), 7);
  EXPECT_LE(largest_difference(built->predict(answer.x), answer.y), 1e-6);
  kd::set_distribution(nullptr);
}

TEST(KerasFilesOnAMesh, SavedFromTheMeshLoadsOnOneProcess) {
  if (kd::num_processes() % 2 != 0) GTEST_SKIP() << "needs an even number of processes";
  const std::string stem = "/tmp/keras_files_on_a_mesh_" + std::to_string(kd::num_processes());
  Answer answer = keras_answer();
  clear_session();
  kd::set_distribution(transformer_map());
  std::shared_ptr<Model> model = load_model(reference("transformer_block.keras"));
  model->save(stem + ".keras");
  model->save_weights(stem + ".weights.h5");
  kd::set_distribution(nullptr);

  clear_session();
  std::shared_ptr<Model> reloaded = load_model(stem + ".keras");
  EXPECT_LE(largest_difference(reloaded->predict(answer.x), answer.y), 1e-6);
  EXPECT_EQ(reloaded->optimizer().iterations(), 2);  // Adam's state came through the mesh whole
  std::shared_ptr<Model> fresh = testing::make_keras_file_model("transformer_block");
  fresh->load_weights(stem + ".weights.h5");
  EXPECT_LE(largest_difference(fresh->predict(answer.x), answer.y), 1e-6);
  kd::world().barrier();
  if (kd::process_id() == 0) {
    std::remove((stem + ".keras").c_str());
    std::remove((stem + ".weights.h5").c_str());
  }
}

}  // namespace
}  // namespace keras
