// Functional models under a distribution: a two-input, two-output model with a shared layer and
// a residual trains with fit() (weighted samples, a validation split) to the same losses (total
// and per output) and the same weights on one process, under DataParallel and under ModelParallel (its shared layer split by
// columns, the layer after the merge by rows), within 1e-5 relative. Runs under mpirun -np 2
// and -np 4 and in the Gloo job (tests/CMakeLists.txt), as the rest of keras_mpi_tests.
// Functional graphs need no code of their own for a distribution: their layers' ops follow
// the sharding rules (docs/ARCHITECTURE.md, "Sharding at op dispatch").
#include <gtest/gtest.h>

#include "keras.h"
#include "saving/checkpoint_files.h"
#include "tests/test_helpers.h"

namespace keras {
namespace {

namespace kd = keras::distribution;

struct TrainingResult {
  std::map<std::string, std::vector<double>> history;
  std::vector<std::vector<double>> weights;  // whole, in variable order
  std::vector<std::string> paths;
  std::int64_t local_parameters = 0;
};

layers::DenseOptions named(const std::string& name) {
  layers::DenseOptions options;
  options.name = name;
  return options;
}

// Keras' guide's shape of model: two inputs through one shared layer, a residual, a merge, and
// two heads (a regression score and 3-class logits).
template <typename ModelType = Model>
std::shared_ptr<Model> two_tower_model() {
  KerasTensor left = Input({6}, "left");
  KerasTensor right = Input({6}, "right");
  auto shared = std::make_shared<layers::Dense>(8, "tanh", named("shared"));
  KerasTensor left_code = (*shared)(left);
  KerasTensor right_code = (*shared)(right);
  KerasTensor residual = layers::Add()({left_code, layers::Dense(8, "", named("skip"))(left)});
  KerasTensor joined = layers::Concatenate()({residual, right_code});
  KerasTensor hidden = layers::Dense(8, "relu", named("mix"))(joined);
  KerasTensor score = layers::Dense(1, "", named("score"))(hidden);
  KerasTensor label = layers::Dense(3, "", named("label"))(hidden);
  return std::make_shared<ModelType>(std::vector<KerasTensor>{left, right}, std::vector<KerasTensor>{score, label},
                                     "two_towers");
}

enum class Setup { one_process, data_parallel, model_parallel };

// `own_step`: the model's train_step is Keras' guide's (testing::GuideTrainStepModel); `keras_options`: Adam clips by
// the global norm (far below the gradients', so every step clips), accumulates two steps'
// gradients and keeps moving averages, which the variables take at the end.
// `global_reductions`: the losses' reductions need the global batch's sums (the label loss
// leaves class 1 out of its mean, the score loss divides by the sum of the sample weights).
TrainingResult train(Setup setup, bool own_step = false, bool keras_options = false, bool global_reductions = false) {
  clear_session();
  set_random_seed(5);
  const int processes = kd::num_processes();
  if (setup == Setup::data_parallel) kd::set_distribution(std::make_shared<kd::DataParallel>());
  if (setup == Setup::model_parallel) {
    auto map = std::make_shared<kd::LayoutMap>(kd::DeviceMesh({2, processes / 2}, {"batch", "model"}));
    (*map)["shared/kernel"] = {std::nullopt, "model"};
    (*map)["shared/bias"] = {"model"};
    (*map)["mix/kernel"] = {"model", std::nullopt};
    kd::set_distribution(std::make_shared<kd::ModelParallel>(map));
  }
  std::shared_ptr<Model> model = own_step ? two_tower_model<keras::testing::GuideTrainStepModel>() : two_tower_model();
  CompileOptions options;
  options.loss = {"mse", losses::SparseCategoricalCrossentropy(true)};
  if (global_reductions) {
    options.loss = {losses::MeanSquaredError(losses::Reduction::mean_with_sample_weight),
                    losses::SparseCategoricalCrossentropy(true, /*ignore_class=*/1)};
    options.weighted_metrics = {{"mae"}, {"accuracy"}};  // weighted by the samples' weights
  }
  options.loss_weights = {1.0, 0.5};
  options.metrics = {{"mae"}, {"accuracy"}};
  auto adam = std::make_shared<optimizers::Adam>(0.01);
  if (keras_options) {
    adam->set_global_clipnorm(0.1);
    adam->set_gradient_accumulation_steps(2);
    adam->set_ema(true, 0.9);
  }
  model->compile(adam, options);
  const std::int64_t samples = 32;
  Tensor left = ops::random({RandomDistribution::normal, 0, 1, 11}, {samples, 6});
  Tensor right = ops::random({RandomDistribution::normal, 0, 1, 12}, {samples, 6});
  Tensor score = ops::sum(left * right, {1}, true);
  Tensor label = ops::cast(ops::random({RandomDistribution::uniform, 0, 3, 13}, {samples}, float64), int64);
  FitOptions fit;
  fit.epochs = 2;
  fit.batch_size = 8;
  fit.shuffle = true;
  fit.verbose = 0;
  // Weighted samples (both outputs' losses), and the last quarter validating: each process
  // weighs its rows, and the sums over the processes are the weighted means of one process.
  fit.sample_weight = ops::random({RandomDistribution::uniform, 0.5, 1.5, 14}, {samples});
  if (global_reductions) {  // each head weighed by its own array (Keras' list of sample weights)
    fit.output_sample_weights = {fit.sample_weight, ops::random({RandomDistribution::uniform, 0.0, 2.0, 15}, {samples})};
    fit.sample_weight = Tensor();
  }
  fit.validation_split = 0.25;
  TrainingResult run;
  run.history = model->fit({left, right}, {score, label}, fit).history;
  NoGradGuard no_grad;
  for (Variable* variable : model->variables()) {
    run.paths.push_back(variable->path());
    run.local_parameters += variable->value.size();
    run.weights.push_back(checkpoint::full_tensor(variable->value, variable->value).to_vector<double>());
  }
  kd::set_distribution(nullptr);
  return run;
}

void expect_same_training(const TrainingResult& distributed, const TrainingResult& single, const std::string& what,
                          const std::vector<std::string>& logs = {"loss", "score_loss", "label_loss", "score_mae",
                                                                  "label_accuracy", "val_loss", "val_label_accuracy"}) {
  for (const std::string& log : logs) {
    ASSERT_TRUE(single.history.count(log)) << log;
    ASSERT_TRUE(distributed.history.count(log)) << what << " logs " << log;
    keras::testing::expect_close(distributed.history.at(log), single.history.at(log), 1e-5, what + " " + log);
  }
  ASSERT_EQ(distributed.paths, single.paths);
  for (std::size_t w = 0; w < single.weights.size(); ++w) {
    keras::testing::expect_close(distributed.weights[w], single.weights[w], 1e-5, what + " " + single.paths[w]);
  }
}

TEST(FunctionalParallel, TwoInputsTwoOutputsUnderDataParallelMatchOneProcess) {
  ASSERT_GT(kd::num_processes(), 1);
  TrainingResult single = train(Setup::one_process);
  // Keras' paths: a functional model's variables carry no model name.
  EXPECT_EQ(single.paths.front(), "shared/kernel");
  expect_same_training(train(Setup::data_parallel), single, "DataParallel");
}

TEST(FunctionalParallel, TwoInputsTwoOutputsUnderModelParallelMatchOneProcess) {
  const int processes = kd::num_processes();
  ASSERT_GT(processes, 1);
  if (processes % 2 != 0) GTEST_SKIP() << "the (2, P/2) mesh needs an even process count";
  TrainingResult single = train(Setup::one_process);
  TrainingResult sharded = train(Setup::model_parallel);
  if (processes >= 4) {
    EXPECT_LT(sharded.local_parameters, single.local_parameters) << "the LayoutMap split nothing";
  }
  expect_same_training(sharded, single, "ModelParallel");
}

// Losses whose reductions are not a mean over the rows (ignore_class: the mean over the labels
// kept; mean_with_sample_weight: over the weights' sum) divide by the global batch's sums,
// whatever rows each process holds (some hold none of the kept labels); each head weighs its
// own sample weights, and weighted metrics log the global weighted means.
TEST(FunctionalParallel, LossesThatDivideByGlobalSumsMatchOneProcess) {
  const int processes = kd::num_processes();
  ASSERT_GT(processes, 1);
  TrainingResult single = train(Setup::one_process, false, false, /*global_reductions=*/true);
  const std::vector<std::string> logs = {"loss", "score_loss", "label_loss", "label_accuracy", "score_weighted_mae",
                                         "label_weighted_accuracy", "val_loss", "val_label_weighted_accuracy"};
  expect_same_training(train(Setup::data_parallel, false, false, true), single, "DataParallel", logs);
  if (processes % 2 == 0) {
    expect_same_training(train(Setup::model_parallel, false, false, true), single, "ModelParallel", logs);
  }
}

// A train_step of the user's own under DataParallel and ModelParallel, with the optimizer
// clipping by the global norm, accumulating gradients and averaging the weights: the same
// weights and logs as the same step on one process (its logs: the loss tracker's and the
// compiled metrics', metric_results()).
TEST(FunctionalParallel, ATrainStepOverrideMatchesOneProcess) {
  const int processes = kd::num_processes();
  ASSERT_GT(processes, 1);
  const std::vector<std::string> logs = {"loss", "score_loss", "label_loss", "score_mae", "label_accuracy", "val_loss"};
  TrainingResult single = train(Setup::one_process, /*own_step=*/true, /*clipped=*/true);
  expect_same_training(train(Setup::data_parallel, true, true), single, "DataParallel own train_step", logs);
  if (processes % 2 == 0) {
    expect_same_training(train(Setup::model_parallel, true, true), single, "ModelParallel own train_step", logs);
  }
  // The override trains what fit's own step trains (the clipping is the same too).
  expect_same_training(single, train(Setup::one_process, false, true), "own train_step against fit's", logs);
}

// Metric objects under DataParallel: each process updates its own state from its rows; the
// logs are the global value, and after fit every process's object holds the global state.
struct MetricRun {
  std::vector<double> logged_precision, logged_recall, logged_auc;
  double precision_result = 0, recall_result = 0, auc_result = 0;
};

MetricRun train_with_metric_objects(bool data_parallel) {
  clear_session();
  set_random_seed(8);
  if (data_parallel) kd::set_distribution(std::make_shared<kd::DataParallel>());
  Sequential model({layers::Dense(6, "relu"), layers::Dense(2, "sigmoid")});
  auto precision = std::make_shared<metrics::Precision>();
  auto recall = std::make_shared<metrics::Recall>(0.4);
  auto auc = std::make_shared<metrics::AUC>(50, "PR");  // a state of 4 x 50 counts
  model.compile(optimizers::Adam(0.02), losses::BinaryCrossentropy(), {precision, recall, auc});
  Tensor x = ops::random({RandomDistribution::normal, 0, 1, 31}, {40, 3});
  Tensor y = ops::cast(ops::greater(ops::slice(x, {0, 0}, {40, 2}), ops::scalar_like(x, 0.0)), float32);
  FitOptions fit;
  fit.epochs = 2;
  fit.batch_size = 8;
  fit.verbose = 0;
  History history = model.fit(x, y, fit);
  MetricRun run{history.history["precision"], history.history["recall"], history.history["auc"],
                precision->result(), recall->result(), auc->result()};
  kd::set_distribution(nullptr);
  return run;
}

TEST(FunctionalParallel, MetricObjectsHoldTheGlobalStateOnEveryProcess) {
  ASSERT_GT(kd::num_processes(), 1);
  MetricRun single = train_with_metric_objects(false);
  MetricRun parallel = train_with_metric_objects(true);
  keras::testing::expect_close(parallel.logged_precision, single.logged_precision, 1e-9, "precision logs");
  keras::testing::expect_close(parallel.logged_recall, single.logged_recall, 1e-9, "recall logs");
  EXPECT_NEAR(parallel.precision_result, single.precision_result, 1e-9) << "process " << kd::process_id();
  EXPECT_NEAR(parallel.recall_result, single.recall_result, 1e-9) << "process " << kd::process_id();
  keras::testing::expect_close(parallel.logged_auc, single.logged_auc, 1e-9, "AUC logs");
  EXPECT_NEAR(parallel.auc_result, single.auc_result, 1e-9) << "process " << kd::process_id();
}

}  // namespace
}  // namespace keras
