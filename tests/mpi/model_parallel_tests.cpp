// The model-parallel invariant, from one table: for each (model, mesh, LayoutMap) case, training
// under ModelParallel on every process of the job gives, at every step, the loss of the same
// training on one process, and after 5 Adam steps the same weights (gathered whole), within
// 1e-5 relative. Runs under mpirun -np 2 and -np 4 (meshes are sized from the job). Then the
// bad inputs, each with its message.
#include <gtest/gtest.h>

#include <functional>

#include "distribution/placement.h"
#include "distribution/redistribute.h"
#include "distribution/sharded_tensor.h"
#include "keras.h"
#include "tests/test_helpers.h"

namespace keras {
namespace {

namespace kd = keras::distribution;
using keras::testing::expect_throw_with;

int size() { return kd::num_processes(); }

layers::DenseOptions named(const std::string& name) {
  layers::DenseOptions options;
  options.name = name;
  return options;
}

// A small subclassed model: element-wise ops between layers, as users write them.
class TwoLayerBlock : public Model {
 public:
  TwoLayerBlock() : Model("block") {
    up_ = add_layer(layers::Dense(16, "", named("up")));
    down_ = add_layer(layers::Dense(4, "", named("down")));
  }
  Tensor call(const Tensor& inputs, bool) override {
    Tensor hidden = ops::relu((*up_)(inputs));
    return (*down_)(hidden * 0.5 + hidden);  // elementwise with scalars keeps the sharding
  }

 private:
  std::shared_ptr<layers::Dense> up_, down_;
};

struct Case {
  std::string name;
  // Mesh shape and axis names for a job of `processes` processes.
  std::function<kd::DeviceMesh(int processes)> mesh;
  std::function<void(kd::LayoutMap&)> layouts;
  std::function<std::shared_ptr<Model>()> model;
  bool integer_inputs = false;
};

void PrintTo(const Case& test, std::ostream* out) { *out << test.name; }

std::shared_ptr<Model> mlp(bool dropout = false, bool layer_norm = false) {
  std::vector<AnyLayer> stack = {layers::Dense(16, "relu", named("hidden"))};
  if (dropout) stack.push_back(layers::Dropout(0.3, std::nullopt, "dropout"));
  if (layer_norm) stack.push_back(layers::LayerNormalization(1e-3, true, true, "norm"));
  stack.push_back(layers::Dense(8, "tanh", named("middle")));
  stack.push_back(layers::Dense(4, "", named("head")));
  return std::make_shared<Sequential>(stack, "mlp");
}

std::shared_ptr<Model> embedding_model() {
  return std::make_shared<Sequential>(
      std::vector<AnyLayer>{layers::Embedding(24, 8, nullptr, "embedding"), layers::Flatten("flatten"),
                            layers::Dense(8, "relu", named("hidden")), layers::Dense(4, "", named("head"))},
      "embedder");
}

kd::DeviceMesh model_axis(int processes) { return kd::DeviceMesh({1, processes}, {"batch", "model"}); }
kd::DeviceMesh batch_by_model(int processes) {
  return kd::DeviceMesh({2, processes / 2}, {"batch", "model"});
}

std::vector<Case> cases() {
  return {
      {"column_only", model_axis,
       [](kd::LayoutMap& map) {
         map[".*hidden/kernel"] = {std::nullopt, "model"};
         map[".*hidden/bias"] = {"model"};
       },
       [] { return mlp(); }},
      {"row_only", model_axis, [](kd::LayoutMap& map) { map[".*middle/kernel"] = {"model", std::nullopt}; },
       [] { return mlp(); }},
      {"column_then_row", model_axis,
       [](kd::LayoutMap& map) {
         map[".*hidden/kernel"] = {std::nullopt, "model"};
         map[".*hidden/bias"] = {"model"};
         map[".*middle/kernel"] = {"model", std::nullopt};
       },
       [] { return mlp(); }},
      {"both_kernel_axes_on_a_2d_mesh",
       [](int processes) { return kd::DeviceMesh({1, 2, processes / 2}, {"batch", "rows", "columns"}); },
       [](kd::LayoutMap& map) {
         map[".*hidden/kernel"] = {"rows", "columns"};
         map[".*middle/kernel"] = {"columns", "rows"};
         map[".*middle/bias"] = {"rows"};
       },
       [] { return mlp(); }},
      {"batch_by_model_mesh", batch_by_model,
       [](kd::LayoutMap& map) {
         map[".*hidden/kernel"] = {std::nullopt, "model"};
         map[".*hidden/bias"] = {"model"};
         map[".*middle/kernel"] = {"model", std::nullopt};
         map[".*head/kernel"] = {"batch", std::nullopt};  // sharded over the batch axis (FSDP-like)
       },
       [] { return mlp(); }},
      {"embedding_by_vocabulary", model_axis,
       [](kd::LayoutMap& map) { map[".*embedding/embeddings"] = {"model", std::nullopt}; },
       embedding_model, true},
      {"embedding_by_feature", model_axis,
       [](kd::LayoutMap& map) { map[".*embedding/embeddings"] = {std::nullopt, "model"}; },
       embedding_model, true},
      {"layer_norm_in_the_sharded_region", model_axis,
       [](kd::LayoutMap& map) {
         map[".*hidden/kernel"] = {std::nullopt, "model"};
         map[".*norm/gamma"] = {"model"};
         map[".*middle/kernel"] = {"model", std::nullopt};
       },
       [] { return mlp(false, true); }},
      {"dropout_in_the_sharded_region", batch_by_model,
       [](kd::LayoutMap& map) {
         map[".*hidden/kernel"] = {std::nullopt, "model"};
         map[".*hidden/bias"] = {"model"};
         map[".*middle/kernel"] = {"model", std::nullopt};
       },
       [] { return mlp(true); }},
      {"output_relayout", model_axis,
       [](kd::LayoutMap& map) {
         map[".*hidden/output"] = {"batch", "model"};  // replicated kernel, sharded output
         map[".*head/kernel"] = {std::nullopt, "model"};
         map[".*mlp/output"] = {"batch", "model"};  // the model's own output: the logits
       },
       [] { return mlp(); }},
      {"bias_only", model_axis, [](kd::LayoutMap& map) { map[".*middle/bias"] = {"model"}; },
       [] { return mlp(); }},
      {"subclassed_model", model_axis,
       [](kd::LayoutMap& map) {
         map[".*up/kernel"] = {std::nullopt, "model"};
         map[".*down/kernel"] = {"model", std::nullopt};
       },
       [] { return std::make_shared<TwoLayerBlock>(); }},
      {"permuted_devices",
       [](int processes) {
         std::vector<std::string> devices;
         for (int p = processes - 1; p >= 0; --p) devices.push_back("cpu:" + std::to_string(p));
         return kd::DeviceMesh({2, processes / 2}, {"batch", "model"}, devices);
       },
       [](kd::LayoutMap& map) {
         map[".*hidden/kernel"] = {std::nullopt, "model"};
         map[".*middle/kernel"] = {"model", std::nullopt};
       },
       [] { return mlp(); }},
  };
}

struct TrainingRun {
  std::vector<double> losses;
  std::vector<std::vector<double>> weights;  // whole, in variable order
  std::int64_t local_parameters = 0, global_parameters = 0;
  bool model_axes = false;  // whether a mesh axis other than the batch axis has several devices
};

constexpr int kSteps = 5;
constexpr std::int64_t kBatch = 8;

TrainingRun train(const Case& test, bool sharded) {
  clear_session();
  set_random_seed(7);
  if (sharded) {
    auto map = std::make_shared<kd::LayoutMap>(test.mesh(size()));
    test.layouts(*map);
    kd::set_distribution(std::make_shared<kd::ModelParallel>(map));
  }
  std::shared_ptr<Model> model = test.model();
  model->compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true));
  TrainingRun run;
  for (int step = 0; step < kSteps; ++step) {
    RandomSpec data{RandomDistribution::normal, 0, 1, 100u + static_cast<unsigned>(step)};
    Tensor x = test.integer_inputs
                   ? ops::cast(ops::random({RandomDistribution::uniform, 0, 24, 300u + unsigned(step)},
                                           {kBatch, 4}, float64), int64)
                   : ops::random(data, {kBatch, 6});
    Tensor y = ops::cast(ops::random({RandomDistribution::uniform, 0, 4, 200u + unsigned(step)}, {kBatch}, float64),
                         int64);
    run.losses.push_back(model->train_on_batch(x, y));
  }
  NoGradGuard no_grad;
  if (sharded) {
    kd::DeviceMesh mesh = test.mesh(size());
    for (std::size_t axis = 1; axis < mesh.shape().size(); ++axis) run.model_axes |= mesh.shape()[axis] > 1;
  }
  for (Variable* variable : model->variables()) {
    run.local_parameters += variable->value.size();
    run.global_parameters += shape_size(variable->global_shape());
    Tensor whole = variable->value;
    if (auto sharding = kd::sharding_of(whole)) {
      whole = kd::redistribute(whole, *sharding, kd::Sharding::replicated(sharding->mesh(), sharding->global_shape()));
    }
    run.weights.push_back(whole.to_vector<double>());
  }
  kd::set_distribution(nullptr);
  return run;
}

class ModelParallelTable : public ::testing::TestWithParam<Case> {};

TEST_P(ModelParallelTable, MatchesOneProcess) {
  ASSERT_GT(size(), 1);
  const Case& test = GetParam();
  TrainingRun single = train(test, false);
  TrainingRun sharded = train(test, true);
  // The layouts took effect: this process holds less than the whole model.
  if (sharded.model_axes) {
    EXPECT_LT(sharded.local_parameters, sharded.global_parameters);
  }
  EXPECT_EQ(sharded.global_parameters, single.global_parameters);
  keras::testing::expect_close(sharded.losses, single.losses, 1e-5, test.name + " losses");
  ASSERT_EQ(sharded.weights.size(), single.weights.size());
  for (std::size_t w = 0; w < single.weights.size(); ++w) {
    keras::testing::expect_close(sharded.weights[w], single.weights[w], 1e-5,
                                 test.name + " weight " + std::to_string(w));
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ModelParallelTable, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& param) { return param.param.name; });

}  // namespace
}  // namespace keras
