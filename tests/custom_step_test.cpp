// Overriding the step, as Keras 3's guide "Customizing what happens in fit()" does: a
// train_step of the user's own (outputs, compute_loss, apply_gradients, compute_metrics) trains
// the same model as fit's own step, with the same logs; one that calls the default
// (Model::train_step, Keras' super().train_step) is fit's own step; a test_step of the user's
// own drives evaluate(); and the step's methods say so when called outside fit. The same under
// DataParallel and ModelParallel is tests/mpi/functional_parallel_tests.cpp's.
#include "tests/test_helpers.h"

namespace keras {
namespace {

using testing::expect_throw_with;

// Keras' guide's first example, line for line.
class CustomStepModel : public Sequential {
 public:
  using Sequential::Sequential;
  int train_steps = 0, test_steps = 0;

  Logs train_step(const StepData& data) override {
    ++train_steps;
    Tensor y_pred = (*this)(data.x[0], /*training=*/true);
    Tensor loss = compute_loss(data, {y_pred});
    apply_gradients(loss);
    return compute_metrics(data, {y_pred}, loss);
  }

  Logs test_step(const StepData& data) override {
    ++test_steps;
    Tensor y_pred = (*this)(data.x[0], /*training=*/false);
    return compute_metrics(data, {y_pred}, compute_loss(data, {y_pred}));
  }
};

// An override that counts its steps and runs the default (Keras' super().train_step(data)).
class CountingModel : public Sequential {
 public:
  using Sequential::Sequential;
  int train_steps = 0;
  Logs train_step(const StepData& data) override {
    ++train_steps;
    return Model::train_step(data);
  }
};

struct TrainingRun {
  History history;
  std::map<std::string, double> evaluation;
  std::vector<std::vector<double>> weights;
};

template <typename ModelType>
TrainingRun train(ModelType& model, std::shared_ptr<optimizers::Optimizer> optimizer) {
  testing::Blobs data = testing::make_blobs(60, 4);
  model.compile(std::move(optimizer), losses::SparseCategoricalCrossentropy(true), {"accuracy"});
  FitOptions options;
  options.batch_size = 16;  // a last batch of 12 rows: the loss tracker weighs batches by rows
  options.epochs = 3;
  options.verbose = 0;
  options.validation_data = {data.x, data.y};
  TrainingRun run;
  run.history = model.fit(data.x, data.y, options);
  run.evaluation = model.evaluate(data.x, data.y, {.batch_size = 16, .verbose = 0});
  for (const Tensor& weight : model.weights()) run.weights.push_back(weight.to_vector<double>());
  return run;
}

std::vector<AnyLayer> layer_stack() { return {layers::Dense(8, "relu"), layers::Dense(3)}; }

void expect_same_run(const TrainingRun& custom, const TrainingRun& builtin, const std::string& what) {
  for (const char* log : {"loss", "accuracy", "val_loss", "val_accuracy"}) {
    ASSERT_TRUE(custom.history.history.count(log)) << what << " logs no " << log;
    testing::expect_close(custom.history.history.at(log), builtin.history.history.at(log), 1e-12, what + " " + log);
  }
  EXPECT_EQ(custom.history.history.size(), builtin.history.history.size()) << what;
  for (const auto& [name, value] : builtin.evaluation) {
    ASSERT_TRUE(custom.evaluation.count(name)) << what << " evaluate() gives no " << name;
    EXPECT_NEAR(custom.evaluation.at(name), value, 1e-12) << what << " " << name;
  }
  ASSERT_EQ(custom.weights.size(), builtin.weights.size());
  for (std::size_t w = 0; w < builtin.weights.size(); ++w) {
    testing::expect_close(custom.weights[w], builtin.weights[w], 1e-12, what + " weight " + std::to_string(w));
  }
}

TEST(CustomStep, KerasGuidesTrainStepTrainsAsFitsOwnStep) {
  clear_session();
  set_random_seed(21);
  Sequential builtin(layer_stack());
  TrainingRun expected = train(builtin, std::make_shared<optimizers::Adam>(0.02));
  clear_session();
  set_random_seed(21);
  CustomStepModel custom(layer_stack());
  TrainingRun got = train(custom, std::make_shared<optimizers::Adam>(0.02));
  EXPECT_EQ(custom.train_steps, 3 * 4);
  EXPECT_EQ(custom.test_steps, 3 * 4 + 4) << "validation after each epoch, then evaluate()";
  expect_same_run(got, expected, "custom train_step");
  // Keras' model.metrics: the loss tracker first, then the compiled metrics.
  std::vector<metrics::MetricPtr> tracked = custom.metrics();
  ASSERT_EQ(tracked.size(), 2u);
  EXPECT_EQ(tracked[0]->name(), "loss");
  EXPECT_EQ(tracked[1]->name(), "accuracy");
  EXPECT_NEAR(tracked[0]->result(), got.evaluation.at("loss"), 1e-12) << "the last step's state: evaluate()'s";
}

// Two outputs: compute_loss updates each output's loss tracker, so a step of one's own logs
// "<output>_loss" as fit's own step does (Keras' compiled loss keeps those trackers).
template <typename ModelType>
History train_two_heads() {
  clear_session();
  set_random_seed(4);
  KerasTensor input = Input({2}, "features");
  KerasTensor hidden = layers::Dense(8, "relu")(input);
  layers::DenseOptions score_options, label_options;
  score_options.name = "score";
  label_options.name = "label";
  KerasTensor score = layers::Dense(1, "", score_options)(hidden);
  KerasTensor label = layers::Dense(3, "", label_options)(hidden);
  ModelType model(std::vector<KerasTensor>{input}, std::vector<KerasTensor>{score, label}, "two_heads");
  CompileOptions options;
  options.loss = {"mse", losses::SparseCategoricalCrossentropy(true)};
  options.loss_weights = {1.0, 0.5};
  options.metrics = {{"mae"}, {"accuracy"}};
  model.compile(std::make_shared<optimizers::Adam>(0.01), options);
  testing::Blobs data = testing::make_blobs(40, /*seed=*/4);  // 40 points of 2 features, 3 classes
  Tensor target = ops::sum(data.x, {1}, true);
  FitOptions fit;
  fit.batch_size = 16;
  fit.epochs = 2;
  fit.verbose = 0;
  fit.shuffle = false;
  return model.fit({data.x}, {target, data.y}, fit);
}

TEST(CustomStep, AStepOfItsOwnLogsEachOutputsLoss) {
  History builtin = train_two_heads<Model>();
  History custom = train_two_heads<testing::GuideTrainStepModel>();
  for (const char* log : {"loss", "score_loss", "label_loss", "score_mae", "label_accuracy"}) {
    ASSERT_TRUE(custom.history.count(log)) << "a custom step logs no " << log;
    testing::expect_close(custom.history.at(log), builtin.history.at(log), 1e-12, log);
  }
}

TEST(CustomStep, AnOverrideThatCallsTheDefaultIsFitsOwnStep) {
  clear_session();
  set_random_seed(22);
  Sequential builtin(layer_stack());
  TrainingRun expected = train(builtin, std::make_shared<optimizers::SGD>(0.1, 0.9));
  clear_session();
  set_random_seed(22);
  CountingModel counting(layer_stack());
  TrainingRun got = train(counting, std::make_shared<optimizers::SGD>(0.1, 0.9));
  EXPECT_EQ(counting.train_steps, 12);
  expect_same_run(got, expected, "super().train_step");
}

// A step that is not the compiled loss: the guide's "lower-level" example, a loss of its own
// and a metric tracker of its own, which fit() logs as returned.
class OwnLossModel : public Sequential {
 public:
  using Sequential::Sequential;
  std::shared_ptr<metrics::Mean> tracker = std::make_shared<metrics::Mean>("own_loss");
  Logs train_step(const StepData& data) override {
    Tensor y_pred = (*this)(data.x[0], true);
    Tensor loss = ops::mean(ops::square(y_pred - data.y[0]));
    apply_gradients(loss);
    tracker->update_state(loss.detach());
    return {{"own_loss", tracker->result()}};
  }
};

TEST(CustomStep, AStepOfItsOwnLogsWhatItReturns) {
  clear_session();
  set_random_seed(23);
  OwnLossModel model({layers::Dense(1)});
  model.compile(optimizers::SGD(0.05), "mse");
  Tensor x = ops::random({RandomDistribution::normal, 0, 1, 5}, {32, 2});
  Tensor y = ops::sum(x, {1}, true);
  History history = model.fit(x, y, {.batch_size = 8, .epochs = 4, .verbose = 0});
  ASSERT_EQ(history.history.size(), 1u) << "only what the step returned";
  const std::vector<double>& losses = history.history.at("own_loss");
  ASSERT_EQ(losses.size(), 4u);
  EXPECT_LT(losses.back(), losses.front()) << "it learns";
}

TEST(CustomStep, TrainOnBatchRunsTheOverride) {
  testing::Blobs data = testing::make_blobs(16, 6);
  clear_session();
  set_random_seed(24);
  Sequential builtin(layer_stack());
  builtin.compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true));
  const double expected = builtin.train_on_batch(data.x, data.y);
  clear_session();
  set_random_seed(24);
  CustomStepModel custom(layer_stack());
  custom.compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true));
  EXPECT_NEAR(custom.train_on_batch(data.x, data.y), expected, 1e-12);
  EXPECT_EQ(custom.train_steps, 1);
  OwnLossModel own({layers::Dense(3)});
  own.compile(optimizers::SGD(0.1), "mse");
  expect_throw_with<ValueError>([&] { own.train_on_batch(data.x, ops::one_hot(data.y, 3)); },
                                "returned no \"loss\" in its logs");
}

TEST(CustomStep, TheStepsMethodsSayWhereTheyRun) {
  clear_session();
  CustomStepModel model({layers::Dense(2)});
  model.compile(optimizers::SGD(0.1), "mse");
  Tensor x = Tensor::ones({4, 3}), y = Tensor::zeros({4, 2});
  StepData data{{x}, {y}};
  expect_throw_with<ValueError>([&] { model.apply_gradients(ops::sum(model(x))); },
                                "apply_gradients runs inside fit's train_step");
  expect_throw_with<ValueError>([&] { model.Model::train_step(data); }, "call fit() or evaluate()");
  // compute_loss and compute_metrics need no step (Keras' do not either).
  Tensor loss = model.compute_loss(data, {model(x)});
  EXPECT_EQ(loss.size(), 1);
  Logs logs = model.compute_metrics(data, {model(x)}, loss);
  EXPECT_NEAR(logs.at("loss"), loss.item(), 1e-7);
  expect_throw_with<ValueError>([&] { model.compute_loss(StepData{{x}, {}}, {model(x)}); },
                                "takes one target array for each, got 0");
}

}  // namespace
}  // namespace keras
