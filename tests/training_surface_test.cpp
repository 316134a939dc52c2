// Keras' training surface against Keras itself: each loss and learning-rate schedule here gives,
// on the same inputs, the value Keras 3 on JAX gives (tests/reference/keras_training_surface.h,
// made by tests/interop/make_training_surface_references.py), within 1e-6. Plus the argument
// checks, a schedule driving an optimizer as Keras' does, and each optimizer and clipping
// setting step by step.
#include <cmath>
#include <functional>
#include <limits>

#include "tests/reference/keras_training_surface.h"
#include "tests/test_helpers.h"

namespace keras {
namespace {

using testing::expect_throw_with;

Tensor tensor(const std::vector<double>& values, const Shape& shape) {
  std::vector<float> single(values.begin(), values.end());
  return Tensor::from_vector(single, shape);
}

struct LossCase {
  const char* name;
  losses::LossPtr loss;
  const std::vector<double>& y_true;
  const std::vector<double>& y_pred;
  double keras_value;
};

TEST(KerasLosses, MatchKerasOnTheSameInputs) {
  using namespace keras::reference;
  using namespace keras::losses;
  const std::vector<double> reversed_probabilities = [] {
    std::vector<double> rows;
    for (int row = 3; row >= 0; --row) {
      for (int column = 0; column < 3; ++column) rows.push_back(kProbabilities[row * 3 + column]);
    }
    return rows;
  }();
  std::vector<LossCase> cases = {
      {"BinaryCrossentropy", std::make_shared<BinaryCrossentropy>(), kBinaryTargets, kSigmoid, kBinaryCrossentropy},
      {"BinaryCrossentropy(from_logits)", std::make_shared<BinaryCrossentropy>(true), kBinaryTargets, kLogits,
       kBinaryCrossentropyFromLogits},
      {"BinaryCrossentropy(label_smoothing=0.2)", std::make_shared<BinaryCrossentropy>(false, 0.2), kBinaryTargets,
       kSigmoid, kBinaryCrossentropySmoothed},
      {"BinaryCrossentropy(from_logits, label_smoothing=0.1)", std::make_shared<BinaryCrossentropy>(true, 0.1),
       kBinaryTargets, kLogits, kBinaryCrossentropyFromLogitsSmoothed},
      {"CategoricalCrossentropy(label_smoothing=0.2)", std::make_shared<CategoricalCrossentropy>(false, 0.2), kOneHot,
       kProbabilities, kCategoricalCrossentropySmoothed},
      {"CategoricalCrossentropy(from_logits, label_smoothing=0.1)",
       std::make_shared<CategoricalCrossentropy>(true, 0.1), kOneHot, kLogits,
       kCategoricalCrossentropyFromLogitsSmoothed},
      {"MeanAbsoluteError", std::make_shared<MeanAbsoluteError>(), kRegressionTargets, kRegressionPredictions,
       kMeanAbsoluteError},
      {"Huber", std::make_shared<Huber>(), kRegressionTargets, kRegressionPredictions, kHuber},
      {"Huber(delta=0.5)", std::make_shared<Huber>(0.5), kRegressionTargets, kRegressionPredictions, kHuberDelta},
      {"KLDivergence", std::make_shared<KLDivergence>(), reversed_probabilities, kProbabilities, kKLDivergence},
      {"CosineSimilarity", std::make_shared<CosineSimilarity>(), kRegressionTargets, kRegressionPredictions,
       kCosineSimilarity},
      {"CosineSimilarity(axis=0)", std::make_shared<CosineSimilarity>(0), kRegressionTargets,
       kRegressionPredictions, kCosineSimilarityAxis0},
  };
  for (const LossCase& test : cases) {
    double ours = (*test.loss)(tensor(test.y_true, {4, 3}), tensor(test.y_pred, {4, 3})).item();
    EXPECT_NEAR(ours, test.keras_value, 1e-6 * std::max(1.0, std::abs(test.keras_value))) << test.name;
  }
}

TEST(KerasLosses, ByNameAndTheirChecks) {
  for (const char* name : {"binary_crossentropy", "mae", "mean_absolute_error", "huber", "kld", "kl_divergence",
                           "cosine_similarity"}) {
    EXPECT_NE(losses::get(name), nullptr) << name;
  }
  expect_throw_with<ValueError>([] { losses::get("hinge"); }, "unknown loss 'hinge'");
  expect_throw_with<ValueError>([] { losses::BinaryCrossentropy(false, 1.5); }, "label_smoothing must be in [0, 1]");
  expect_throw_with<ValueError>([] { losses::Huber(0.0); }, "delta must be > 0");
  expect_throw_with<ShapeError>(
      [] { losses::MeanAbsoluteError()(Tensor::zeros({2, 3}), Tensor::zeros({2, 2})); }, "must have the same shape");
  // The gradient of a from-logits binary cross-entropy is sigmoid(x) - y, over the elements.
  Tensor logits = Tensor::from_vector<float>({-2, 0.5, 3}, {1, 3});
  logits.set_requires_grad(true);
  Tensor targets = Tensor::from_vector<float>({0, 1, 1}, {1, 3});
  losses::BinaryCrossentropy(true)(targets, logits).backward();
  std::vector<double> gradient = logits.grad().to_vector<double>();
  std::vector<double> x = {-2, 0.5, 3}, y = {0, 1, 1};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(gradient[i], (1 / (1 + std::exp(-x[i])) - y[i]) / 3, 1e-6);
}

TEST(KerasSchedules, MatchKerasAtEveryStep) {
  using namespace keras::reference;
  namespace s = keras::optimizers::schedules;
  struct Case {
    const char* name;
    std::shared_ptr<s::LearningRateSchedule> schedule;
    const std::vector<double>& keras_values;
  };
  std::vector<Case> cases = {
      {"ExponentialDecay", std::make_shared<s::ExponentialDecay>(0.1, 10, 0.5), kExponentialDecay},
      {"ExponentialDecay(staircase)", std::make_shared<s::ExponentialDecay>(0.1, 10, 0.5, true),
       kExponentialDecayStaircase},
      {"PiecewiseConstantDecay",
       std::make_shared<s::PiecewiseConstantDecay>(std::vector<std::int64_t>{10, 100}, std::vector<double>{1, 0.5, 0.1}),
       kPiecewiseConstantDecay},
      {"PolynomialDecay", std::make_shared<s::PolynomialDecay>(0.1, 100), kPolynomialDecay},
      {"PolynomialDecay(power=2, cycle)", std::make_shared<s::PolynomialDecay>(0.1, 10, 0.01, 2.0, true),
       kPolynomialDecaySquaredCycle},
      {"InverseTimeDecay", std::make_shared<s::InverseTimeDecay>(0.1, 10, 0.5), kInverseTimeDecay},
      {"InverseTimeDecay(staircase)", std::make_shared<s::InverseTimeDecay>(0.1, 10, 0.5, true),
       kInverseTimeDecayStaircase},
      {"CosineDecay", std::make_shared<s::CosineDecay>(0.1, 100), kCosineDecay},
      {"CosineDecay(alpha=0.1)", std::make_shared<s::CosineDecay>(0.1, 100, 0.1), kCosineDecayAlpha},
      {"CosineDecay(warmup)", std::make_shared<s::CosineDecay>(0.0, 100, 0.0, 0.1, 10), kCosineDecayWarmup},
  };
  for (const Case& test : cases) {
    for (std::size_t i = 0; i < kScheduleSteps.size(); ++i) {
      auto step = static_cast<std::int64_t>(kScheduleSteps[i]);
      // Keras computes in float32, where 1 + cos(pi * t) loses digits near the end of a cosine
      // decay (4e-9 of 0.002 at step 101): 1e-6 of the larger of the value and the rates' 0.1.
      EXPECT_NEAR((*test.schedule)(step), test.keras_values[i], 1e-6 * std::max(std::abs(test.keras_values[i]), 0.1))
          << test.name << " at step " << step;
    }
  }
}

TEST(KerasSchedules, DriveTheOptimizerAsInKeras) {
  // SGD with an ExponentialDecay(0.1, 1, 0.5) rate and gradient 1: Keras' weights after each step.
  Tensor weight = Tensor::from_vector<float>({1, -2, 3}, {3});
  optimizers::SGD sgd(optimizers::schedules::ExponentialDecay(0.1, 1, 0.5));
  EXPECT_NEAR(sgd.learning_rate(), 0.1, 1e-12);
  std::vector<double> trajectory;
  for (int step = 0; step < 4; ++step) {
    sgd.apply({weight}, {Tensor::ones({3})});
    for (double value : weight.to_vector<double>()) trajectory.push_back(value);
  }
  testing::expect_close(trajectory, reference::kScheduledSgdWeights, 1e-6, "SGD on a schedule");
  EXPECT_NEAR(sgd.learning_rate(), 0.1 * std::pow(0.5, 4), 1e-12);  // the next step's
  expect_throw_with<ValueError>([&] { sgd.set_learning_rate(0.5); }, "was made with a learning rate schedule");
  expect_throw_with<ValueError>([] { optimizers::schedules::PiecewiseConstantDecay({10, 5}, {1, 2, 3}); },
                                "boundaries must increase");
  expect_throw_with<ValueError>([] { optimizers::schedules::PiecewiseConstantDecay({10}, {1}); },
                                "1 boundaries need 2 values, got 1");
  expect_throw_with<ValueError>([] { optimizers::schedules::CosineDecay(0.1, 0); }, "decay_steps must be a positive");
}

// Each loss with sample weights: Keras' sum_over_batch_size, sum(losses * weights) / count.
TEST(KerasLosses, SampleWeightsReduceAsInKeras) {
  using namespace reference;
  Tensor weights = tensor(kLossSampleWeights, {4});
  Tensor labels = ops::cast(tensor(kSparseLabels, {4}), int64);
  struct Case {
    const char* name;
    losses::LossPtr loss;
    Tensor y_true, y_pred;
    double keras_value;
  };
  const std::vector<Case> cases = {
      {"sparse_categorical_crossentropy", std::make_shared<losses::SparseCategoricalCrossentropy>(true), labels,
       tensor(kLogits, {4, 3}), kWeightedSparseCategoricalCrossentropy},
      {"categorical_crossentropy", std::make_shared<losses::CategoricalCrossentropy>(), tensor(kOneHot, {4, 3}),
       tensor(kProbabilities, {4, 3}), kWeightedCategoricalCrossentropy},
      {"binary_crossentropy", std::make_shared<losses::BinaryCrossentropy>(true), tensor(kBinaryTargets, {4, 3}),
       tensor(kLogits, {4, 3}), kWeightedBinaryCrossentropy},
      {"mean_squared_error", std::make_shared<losses::MeanSquaredError>(), tensor(kRegressionTargets, {4, 3}),
       tensor(kRegressionPredictions, {4, 3}), kWeightedMeanSquaredError},
      {"mean_absolute_error", std::make_shared<losses::MeanAbsoluteError>(), tensor(kRegressionTargets, {4, 3}),
       tensor(kRegressionPredictions, {4, 3}), kWeightedMeanAbsoluteError},
      {"huber", std::make_shared<losses::Huber>(), tensor(kRegressionTargets, {4, 3}),
       tensor(kRegressionPredictions, {4, 3}), kWeightedHuber},
      {"kl_divergence", std::make_shared<losses::KLDivergence>(), tensor(kOneHot, {4, 3}),
       tensor(kProbabilities, {4, 3}), kWeightedKLDivergence},
      {"cosine_similarity", std::make_shared<losses::CosineSimilarity>(), tensor(kRegressionTargets, {4, 3}),
       tensor(kRegressionPredictions, {4, 3}), kWeightedCosineSimilarity},
  };
  for (const Case& test : cases) {
    EXPECT_NEAR((*test.loss)(test.y_true, test.y_pred, weights).item(), test.keras_value,
                1e-6 * std::max(1.0, std::abs(test.keras_value)))
        << test.name;
    // Weights of shape (batch, 1) are the same weights.
    EXPECT_NEAR((*test.loss)(test.y_true, test.y_pred, ops::reshape(weights, {4, 1})).item(), test.keras_value,
                1e-6 * std::max(1.0, std::abs(test.keras_value)))
        << test.name << " (batch, 1)";
  }
  expect_throw_with<ShapeError>(
      [&] { losses::MeanSquaredError()(tensor(kRegressionTargets, {4, 3}), tensor(kRegressionPredictions, {4, 3}),
                                       Tensor::ones({3})); },
      "sample_weight of shape (3,) does not fit the values of shape (4,)");
  // A loss from a function of the user's own reduces and weighs as the built-in ones.
  losses::FunctionLoss squared([](const Tensor& y, const Tensor& p) { return ops::mean(ops::square(p - y), {-1}); },
                               "my_mse");
  EXPECT_NEAR(squared(tensor(kRegressionTargets, {4, 3}), tensor(kRegressionPredictions, {4, 3}), weights).item(),
              kWeightedMeanSquaredError, 1e-6 * std::max(1.0, kWeightedMeanSquaredError));
}

// The other reductions, and SparseCategoricalCrossentropy's ignore_class (the mean over the
// labels kept), against Keras on the same inputs.
TEST(KerasLosses, ReductionsAndIgnoreClassMatchKeras) {
  using namespace reference;
  using losses::Reduction;
  using losses::SparseCategoricalCrossentropy;
  Tensor weights = tensor(kLossSampleWeights, {4});
  Tensor targets = tensor(kRegressionTargets, {4, 3}), predictions = tensor(kRegressionPredictions, {4, 3});
  Tensor logits = tensor(kLogits, {4, 3});
  auto labels = [](const std::vector<double>& values, Shape shape) { return ops::cast(tensor(values, shape), int64); };
  auto near = [](double value, double keras, const char* what) {
    EXPECT_NEAR(value, keras, 1e-6 * std::max(1.0, std::abs(keras))) << what;
  };
  near(losses::MeanSquaredError(Reduction::sum)(targets, predictions, weights).item(), kMseSum, "sum");
  near(losses::MeanSquaredError(Reduction::mean)(targets, predictions, weights).item(), kMseMean, "mean");
  near(losses::MeanSquaredError(Reduction::mean_with_sample_weight)(targets, predictions, weights).item(),
       kMseMeanWithSampleWeight, "mean_with_sample_weight");
  near(losses::MeanSquaredError(Reduction::mean_with_sample_weight)(targets, predictions).item(),
       kMseMeanWithSampleWeightUnweighted, "mean_with_sample_weight without weights");
  testing::expect_close(losses::MeanSquaredError(Reduction::none)(targets, predictions, weights).to_vector<double>(),
                        kMseNone, 1e-6, "none");
  Tensor padded = labels(kPaddedLabels, {4}), class_two = labels(kClassTwoLabels, {4});
  near(SparseCategoricalCrossentropy(true, -1)(padded, logits).item(), kIgnorePadding, "ignore_class -1");
  near(SparseCategoricalCrossentropy(true, 2)(class_two, logits, weights).item(), kIgnoreClassTwoWeighted,
       "ignore_class 2, weighted");
  near(SparseCategoricalCrossentropy(true, 2, Reduction::sum)(class_two, logits, weights).item(), kIgnoreClassTwoSum,
       "ignore_class 2, sum");
  near(SparseCategoricalCrossentropy(true, 2, Reduction::mean_with_sample_weight)(class_two, logits, weights).item(),
       kIgnoreClassTwoMeanWithSampleWeight, "ignore_class 2, mean_with_sample_weight");
  near(SparseCategoricalCrossentropy(true, -1)(labels({-1, -1, -1, -1}, {4}), logits).item(), kIgnoreEveryLabel,
       "every label ignored");
  near(SparseCategoricalCrossentropy(true, -1)(labels(kSequenceLabels, {2, 4}), tensor(kSequenceLogits, {2, 4, 3}))
           .item(),
       kIgnoreInSequences, "sequences");
  testing::expect_close(SparseCategoricalCrossentropy(true, -1, Reduction::none)(padded, logits).to_vector<double>(),
                        kIgnorePaddingNone, 1e-6, "ignore_class, none");
  // The ignored labels give no gradient; the kept ones their mean's.
  Tensor leaf = logits.detach();
  leaf.set_requires_grad(true);
  SparseCategoricalCrossentropy(true, -1)(padded, leaf).backward();
  std::vector<double> gradient = leaf.grad().to_vector<double>();
  for (int column = 0; column < 3; ++column) {
    EXPECT_EQ(gradient[3 + column], 0.0);
    EXPECT_EQ(gradient[9 + column], 0.0);
  }
  EXPECT_NE(gradient[0], 0.0);
  // Without ignore_class a padding label is out of range, as before; with it, others still are.
  expect_throw_with<ValueError>([&] { SparseCategoricalCrossentropy(true)(padded, logits); }, "label -1 is out of range");
  expect_throw_with<ValueError>([&] { SparseCategoricalCrossentropy(true, 2)(padded, logits); },
                                "or the ignore_class 2");
  EXPECT_EQ(losses::reduction_from_name("mean_with_sample_weight"), Reduction::mean_with_sample_weight);
  expect_throw_with<ValueError>([] { losses::reduction_from_name("average"); }, "unknown loss reduction 'average'");
}

// fit() with Keras' options against Keras' fit of the same Dense layer: sample_weight,
// class_weight with validation_split and validation_freq, initial_epoch and steps_per_epoch.
struct KerasFitRun {
  History history;
  std::vector<double> weights;
};

KerasFitRun fit_like_keras(const FitOptions& options,
                           losses::LossPtr loss = std::make_shared<losses::SparseCategoricalCrossentropy>(true),
                           std::vector<MetricSpec> weighted_metrics = {}) {
  using namespace reference;
  clear_session();
  Sequential model({layers::Dense(3)});
  CompileOptions compile;
  compile.loss = {loss};
  compile.metrics = {{"accuracy"}};
  if (!weighted_metrics.empty()) compile.weighted_metrics = {weighted_metrics};
  model.compile(optimizers::SGD(0.1), compile);
  Tensor x = tensor(kFitX, {12, 4});
  model.predict(x);  // builds it
  std::vector<Variable*> variables = model.variables();
  variables.at(0)->value.assign(tensor(kFitKernel, {4, 3}));
  variables.at(1)->value.assign(tensor(kFitBias, {3}));
  FitOptions settings = options;
  settings.batch_size = 4;
  settings.shuffle = false;
  settings.verbose = 0;
  KerasFitRun run;
  run.history = model.fit(x, ops::cast(tensor(kFitY, {12}), int64), settings);
  for (Variable* variable : model.variables()) {
    for (double value : variable->value.to_vector<double>()) run.weights.push_back(value);
  }
  return run;
}

TEST(KerasFit, SampleAndClassWeightsMatchKeras) {
  using namespace reference;
  FitOptions weighted;
  weighted.epochs = 2;
  weighted.sample_weight = tensor(kFitSampleWeight, {12});
  KerasFitRun by_sample = fit_like_keras(weighted);
  testing::expect_close(by_sample.weights, kFitSampleWeightedWeights, 1e-5, "sample_weight weights");
  testing::expect_close(by_sample.history.history.at("loss"), kFitSampleWeightedLoss, 1e-5, "sample_weight loss");

  FitOptions by_class;
  by_class.epochs = 3;
  by_class.class_weight = {{0, 1.0}, {1, 2.0}, {2, 0.5}};
  by_class.validation_split = 0.25;
  by_class.validation_freq = 2;
  KerasFitRun run = fit_like_keras(by_class);
  testing::expect_close(run.weights, kFitClassWeightedWeights, 1e-5, "class_weight weights");
  testing::expect_close(run.history.history.at("loss"), kFitClassWeightedLoss, 1e-5, "class_weight loss");
  testing::expect_close(run.history.history.at("accuracy"), kFitClassWeightedAccuracy, 1e-6, "accuracy");
  // Validation after the second epoch only: one value each.
  testing::expect_close(run.history.history.at("val_loss"), kFitClassWeightedValLoss, 1e-5, "val_loss");
  testing::expect_close(run.history.history.at("val_accuracy"), kFitClassWeightedValAccuracy, 1e-6, "val_accuracy");

  FitOptions both = weighted;
  both.class_weight = {{0, 2.0}};
  expect_throw_with<ValueError>([&] { fit_like_keras(both); }, "(sample_weight) or class_weight, not both");
  FitOptions missing;
  missing.class_weight = {{0, 2.0}};
  expect_throw_with<ValueError>([&] { fit_like_keras(missing); }, "class_weight covers the classes 0 to 0");
  FitOptions too_small;
  too_small.validation_split = 0.95;  // floor(12 * 0.05) = 0 training samples
  expect_throw_with<ValueError>([&] { fit_like_keras(too_small); }, "not enough to split it");
  FitOptions bad_split;
  bad_split.validation_split = 1.0;
  expect_throw_with<ValueError>([&] { fit_like_keras(bad_split); }, "validation_split must be in [0, 1), got 1");
}

// Keras' fit with a loss that leaves class 2 out of its mean; a loss of reduction "none" cannot
// train (nor can it in Keras).
TEST(KerasFit, IgnoreClassMatchesKeras) {
  using namespace reference;
  FitOptions options;
  options.epochs = 2;
  KerasFitRun run = fit_like_keras(options, std::make_shared<losses::SparseCategoricalCrossentropy>(true, 2));
  testing::expect_close(run.weights, kFitIgnoreClassWeights, 1e-5, "ignore_class weights");
  testing::expect_close(run.history.history.at("loss"), kFitIgnoreClassLoss, 1e-5, "ignore_class loss");
  expect_throw_with<ValueError>(
      [&] {
        fit_like_keras(options, std::make_shared<losses::SparseCategoricalCrossentropy>(true, std::nullopt,
                                                                                         losses::Reduction::none));
      },
      "training needs a scalar");
}

// weighted_metrics beside a metric of the same name log as "weighted_accuracy", weighted by
// sample_weight or by class_weight (on the training samples only), as in Keras.
TEST(KerasFit, WeightedMetricsMatchKeras) {
  using namespace reference;
  auto loss = std::make_shared<losses::SparseCategoricalCrossentropy>(true);
  FitOptions by_sample;
  by_sample.epochs = 2;
  by_sample.sample_weight = tensor(kFitSampleWeight, {12});
  KerasFitRun run = fit_like_keras(by_sample, loss, {"accuracy"});
  testing::expect_close(run.history.history.at("weighted_accuracy"), kFitWeightedAccuracy, 1e-6, "weighted_accuracy");
  testing::expect_close(run.history.history.at("accuracy"), kFitUnweightedAccuracy, 1e-6, "accuracy");
  FitOptions by_class;
  by_class.epochs = 2;
  by_class.class_weight = {{0, 1.0}, {1, 2.0}, {2, 0.5}};
  by_class.validation_split = 0.25;
  run = fit_like_keras(by_class, loss, {"accuracy"});
  testing::expect_close(run.history.history.at("weighted_accuracy"), kFitClassWeightedWeightedAccuracy, 1e-6,
                        "class-weighted weighted_accuracy");
  testing::expect_close(run.history.history.at("val_weighted_accuracy"), kFitClassWeightedValWeightedAccuracy, 1e-6,
                        "val_weighted_accuracy");
  // A metric of one's own that overrides only update_state(y_true, y_pred) refuses weights.
  class Unweighted : public metrics::Metric {
   public:
    Unweighted() : Metric("unweighted") {}
    void update_state(const Tensor&, const Tensor& y_pred) override { add_batch(ops::sum(y_pred) * 0.0, 1.0, 1.0); }
  };
  expect_throw_with<ValueError>([&] { fit_like_keras(by_sample, loss, {std::make_shared<Unweighted>()}); },
                                "metric 'unweighted' takes no sample weights");
  class Neither : public metrics::Metric {
   public:
    Neither() : Metric("neither") {}
  };
  Neither neither;
  expect_throw_with<ValueError>([&] { neither.update_state(Tensor::ones({2}), Tensor::ones({2})); },
                                "overrides neither update_state");
}

// validation_freq as a list of epochs, counted from 1 as Keras counts them.
TEST(KerasFit, ValidationFrequencyAsAListMatchesKeras) {
  using namespace reference;
  FitOptions options;
  options.epochs = 4;
  options.validation_split = 0.25;
  options.validation_freq = {1, 3, 50, 70, 90};  // epochs past the run's end change nothing
  KerasFitRun run = fit_like_keras(options);
  testing::expect_close(run.history.history.at("val_loss"), kFitListedValLoss, 1e-5, "val_loss after epochs 1 and 3");
  testing::expect_close(run.weights, kFitListedWeights, 1e-5, "weights");
  options.validation_freq = {0, 2};
  expect_throw_with<ValueError>([&] { fit_like_keras(options); }, "validation_freq lists the epoch 0");
  options.validation_freq = 0;
  expect_throw_with<ValueError>([&] { fit_like_keras(options); }, "validation_freq must be a positive integer");
}

// Sample weights by output (Keras' list, and the dict that leaves an output out): each head's
// loss and weighted metrics weighed by its own array, against Keras' fit and evaluate of the
// same two-head model.
TEST(KerasFit, SampleWeightsByOutputMatchKeras) {
  using namespace reference;
  clear_session();
  KerasTensor features = Input({4}, "features");
  layers::DenseOptions hidden_options, score_options, label_options;
  hidden_options.name = "hidden";
  score_options.name = "score";
  label_options.name = "label";
  KerasTensor hidden = layers::Dense(5, "tanh", hidden_options)(features);
  Model heads(std::vector<KerasTensor>{features},
              std::vector<KerasTensor>{layers::Dense(1, "", score_options)(hidden),
                                       layers::Dense(3, "", label_options)(hidden)},
              "heads");
  CompileOptions options;
  options.loss = {"mse", losses::SparseCategoricalCrossentropy(true)};
  options.weighted_metrics = {{"mae"}, {"accuracy"}};
  heads.compile(optimizers::SGD(0.1), options);
  Tensor x = tensor(kFitX, {12, 4});
  heads.predict({x});  // builds it
  std::size_t next = 0;
  for (Variable* variable : heads.variables()) {
    const std::int64_t size = variable->value.size();
    std::vector<double> values(kHeadsInitialWeights.begin() + static_cast<std::ptrdiff_t>(next),
                               kHeadsInitialWeights.begin() + static_cast<std::ptrdiff_t>(next + size));
    variable->value.assign(tensor(values, variable->value.shape()));
    next += static_cast<std::size_t>(size);
  }
  ASSERT_EQ(next, kHeadsInitialWeights.size());
  const std::vector<Tensor> y = {tensor(kHeadsScore, {12, 1}), ops::cast(tensor(kFitY, {12}), int64)};
  FitOptions fit;
  fit.batch_size = 4;
  fit.epochs = 2;
  fit.shuffle = false;
  fit.verbose = 0;
  fit.output_sample_weights = {tensor(kHeadsScoreWeight, {12}), tensor(kHeadsLabelWeight, {12})};
  History history = heads.fit({x}, y, fit);
  const std::map<std::string, const std::vector<double>*> keras_logs = {
      {"loss", &kHeads_loss}, {"score_loss", &kHeads_score_loss}, {"label_loss", &kHeads_label_loss},
      {"score_mae", &kHeads_score_mae}, {"label_accuracy", &kHeads_label_accuracy}};
  for (const auto& [log, keras] : keras_logs) testing::expect_close(history.history.at(log), *keras, 1e-5, log);
  std::vector<double> trained;
  for (Variable* variable : heads.variables()) {
    for (double value : variable->value.to_vector<double>()) trained.push_back(value);
  }
  testing::expect_close(trained, kHeadsTrainedWeights, 1e-5, "weights");
  EvaluateOptions evaluate;
  evaluate.batch_size = 4;
  evaluate.verbose = 0;
  evaluate.sample_weight_by_output = {{"score", tensor(kHeadsScoreWeight, {12})}};
  std::map<std::string, double> results = heads.evaluate({x}, y, evaluate);
  const std::map<std::string, double> keras_results = {
      {"loss", kHeadsEvaluate_loss}, {"score_loss", kHeadsEvaluate_score_loss},
      {"label_loss", kHeadsEvaluate_label_loss}, {"score_mae", kHeadsEvaluate_score_mae},
      {"label_accuracy", kHeadsEvaluate_label_accuracy}};
  for (const auto& [log, keras] : keras_results) EXPECT_NEAR(results.at(log), keras, 1e-5) << "evaluate " << log;

  FitOptions both = fit;
  both.sample_weight = tensor(kHeadsScoreWeight, {12});
  expect_throw_with<ValueError>([&] { heads.fit({x}, y, both); }, "one of the three");
  FitOptions one_short = fit;
  one_short.output_sample_weights.pop_back();
  expect_throw_with<ValueError>([&] { heads.fit({x}, y, one_short); }, "1 output_sample_weights for a model of 2");
  evaluate.sample_weight_by_output = {{"scores", tensor(kHeadsScoreWeight, {12})}};
  expect_throw_with<ValueError>([&] { heads.evaluate({x}, y, evaluate); },
                                "names output 'scores', but the model's outputs are score, label");
}

TEST(KerasFit, InitialEpochAndStepsPerEpochMatchKeras) {
  using namespace reference;
  FitOptions options;
  options.epochs = 3;
  options.initial_epoch = 1;
  options.steps_per_epoch = 2;  // a pass is 3 batches: the second epoch runs out after one
  ::testing::internal::CaptureStderr();
  KerasFitRun run = fit_like_keras(options);
  std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warnings.find("the data ran out after 1 of this epoch's steps_per_epoch=2 batches"), std::string::npos)
      << warnings;
  ASSERT_EQ(run.history.epoch, (std::vector<int>{1, 2}));
  testing::expect_close(run.weights, kFitStepsWeights, 1e-5, "steps_per_epoch weights");
  testing::expect_close(run.history.history.at("loss"), kFitStepsLoss, 1e-5, "steps_per_epoch loss");
}

// Four steps of each optimizer (and clipping) on two variables: Keras' weights after each.
TEST(KerasOptimizers, MatchKerasStepByStep) {
  struct Case {
    const char* name;
    std::function<std::shared_ptr<optimizers::Optimizer>()> make;
    const std::vector<double>& keras_weights;
  };
  using namespace optimizers;
  const std::vector<Case> cases = {
      {"RMSprop", [] { return std::make_shared<RMSprop>(0.01); }, reference::kRmspropWeights},
      {"RMSprop centered with momentum", [] { return std::make_shared<RMSprop>(0.01, 0.8, 0.9, 1e-7, true); },
       reference::kRmspropCenteredMomentumWeights},
      {"RMSprop momentum and weight decay",
       [] { return std::make_shared<RMSprop>(0.01, 0.9, 0.5, 1e-7, false, 0.1); },
       reference::kRmspropMomentumDecayWeights},
      {"Adagrad", [] { return std::make_shared<Adagrad>(0.1); }, reference::kAdagradWeights},
      {"Adagrad settings", [] { return std::make_shared<Adagrad>(0.1, 0.5, 1e-5, 0.05); },
       reference::kAdagradSettingsWeights},
      {"SGD clipnorm",
       [] {
         auto sgd = std::make_shared<SGD>(0.1);
         sgd->set_clipnorm(0.5);
         return sgd;
       },
       reference::kSgdClipnormWeights},
      {"SGD clipvalue",
       [] {
         auto sgd = std::make_shared<SGD>(0.1);
         sgd->set_clipvalue(0.3);
         return sgd;
       },
       reference::kSgdClipvalueWeights},
      {"SGD global_clipnorm",
       [] {
         auto sgd = std::make_shared<SGD>(0.1);
         sgd->set_global_clipnorm(0.7);
         return sgd;
       },
       reference::kSgdGlobalClipnormWeights},
      {"Adam global_clipnorm",
       [] {
         auto adam = std::make_shared<Adam>(0.01);
         adam->set_global_clipnorm(0.7);
         return adam;
       },
       reference::kAdamGlobalClipnormWeights},
      {"SGD momentum, gradient_accumulation_steps=2",
       [] {
         auto sgd = std::make_shared<SGD>(0.1, 0.9);
         sgd->set_gradient_accumulation_steps(2);
         return sgd;
       },
       reference::kSgdAccumulatedWeights},
      {"Adam accumulating two steps, then clipped",
       [] {
         auto adam = std::make_shared<Adam>(0.01);
         adam->set_gradient_accumulation_steps(2);
         adam->set_global_clipnorm(0.7);
         return adam;
       },
       reference::kAdamAccumulatedClippedWeights},
      {"SGD use_ema, overwriting every third step",
       [] {
         auto sgd = std::make_shared<SGD>(0.1);
         sgd->set_ema(true, 0.9, 3);
         return sgd;
       },
       reference::kSgdEmaWeights},
  };
  for (const Case& test : cases) {
    std::shared_ptr<Optimizer> optimizer = test.make();
    Tensor first = Tensor::from_vector<float>({1, -2, 3}, {3});
    Tensor second = Tensor::from_vector<float>({0.5f, -0.25f, 2.0f, 1.5f}, {2, 2});
    std::vector<double> trajectory;
    for (std::size_t step = 0; step < 4; ++step) {
      std::vector<double> g1(reference::kOptimizerGradients.begin() + 3 * step,
                             reference::kOptimizerGradients.begin() + 3 * step + 3);
      std::vector<double> g2(reference::kOptimizerGradients2.begin() + 4 * step,
                             reference::kOptimizerGradients2.begin() + 4 * step + 4);
      optimizer->apply({first, second},
                       {tensor(g1, {3}), tensor(g2, {2, 2})});
      for (double value : first.to_vector<double>()) trajectory.push_back(value);
      for (double value : second.to_vector<double>()) trajectory.push_back(value);
    }
    if (optimizer->use_ema()) {  // the end of fit: the variables take their averages
      optimizer->finalize_variable_values({first, second});
      for (double value : first.to_vector<double>()) trajectory.push_back(value);
      for (double value : second.to_vector<double>()) trajectory.push_back(value);
    }
    testing::expect_close(trajectory, test.keras_weights, 1e-6, test.name);
  }
}

TEST(KerasOptimizers, ClippingIsCheckedAsInKeras) {
  optimizers::SGD sgd(0.1);
  sgd.set_clipnorm(1.0);
  expect_throw_with<ValueError>([&] { sgd.set_global_clipnorm(2.0); },
                                "only one of clipnorm, clipvalue and global_clipnorm can be set");
  expect_throw_with<ValueError>([&] { sgd.set_clipvalue(-1.0); }, "clipvalue must be a finite number > 0");
  sgd.set_clipnorm(0.0);  // none
  sgd.set_global_clipnorm(2.0);
  EXPECT_TRUE(sgd.clips_by_norm());
  // A gradient that is not finite makes the global scale NaN, as Keras' clip_by_global_norm does.
  Tensor weight = Tensor::from_vector<float>({1, 2}, {2});
  sgd.apply({weight}, {Tensor::from_vector<float>({std::numeric_limits<float>::infinity(), 1}, {2})});
  EXPECT_TRUE(std::isnan(weight.to_vector<double>()[1]));
  expect_throw_with<ValueError>([] { optimizers::get("adadelta"); }, "expected one of sgd, adam, adamw, rmsprop, adagrad");
  EXPECT_EQ(optimizers::get("rmsprop")->name(), "RMSprop");
  expect_throw_with<ValueError>([] { optimizers::RMSprop(0.01, 1.5); }, "RMSprop rho must be in [0, 1]");
  expect_throw_with<ValueError>([] { optimizers::Adagrad(0.01, -1); }, "initial_accumulator_value must be a finite");
}

// A schedule of the user's own, as Keras' LearningRateSchedule subclass.
class Halving : public optimizers::schedules::LearningRateSchedule {
 public:
  double operator()(std::int64_t step) const override { return step < 2 ? 0.5 : 0.25; }
};

TEST(KerasSchedules, AUserScheduleTrainsAModel) {
  clear_session();
  set_random_seed(1);
  Sequential model({layers::Dense(1)});
  model.compile(optimizers::SGD(Halving()), "mse");
  Tensor x = Tensor::ones({4, 2});
  Tensor y = Tensor::zeros({4, 1});
  model.train_on_batch(x, y);
  EXPECT_EQ(model.optimizer().learning_rate(), 0.5);
  model.train_on_batch(x, y);
  model.train_on_batch(x, y);
  EXPECT_EQ(model.optimizer().learning_rate(), 0.25);
  EXPECT_EQ(model.optimizer().iterations(), 3);
}

// Rows [begin, begin + 2) of a (4, columns) reference array.
Tensor rows(const std::vector<double>& values, std::int64_t begin, std::int64_t columns) {
  std::vector<double> part(values.begin() + begin * columns, values.begin() + (begin + 2) * columns);
  return columns == 1 ? tensor(part, {2}) : tensor(part, {2, columns});
}

TEST(KerasMetrics, MatchKerasOverTwoBatches) {
  using namespace keras::reference;
  struct Case {
    const char* name;
    metrics::MetricPtr metric;
    const std::vector<double>& y_true;
    std::int64_t true_columns;
    const std::vector<double>& y_pred;
    double keras_value;
  };
  std::vector<Case> cases = {
      {"Accuracy", std::make_shared<metrics::Accuracy>(), kExactTargets, 3, kExactPredictions, kAccuracyMetric},
      {"BinaryAccuracy", std::make_shared<metrics::BinaryAccuracy>(), kBinaryTargets, 3, kSigmoid,
       kBinaryAccuracyMetric},
      {"BinaryAccuracy(threshold=0.3)", std::make_shared<metrics::BinaryAccuracy>("binary_accuracy", 0.3),
       kBinaryTargets, 3, kSigmoid, kBinaryAccuracyThresholdMetric},
      {"CategoricalAccuracy", std::make_shared<metrics::CategoricalAccuracy>(), kOneHot, 3, kProbabilities,
       kCategoricalAccuracyMetric},
      {"SparseCategoricalAccuracy", std::make_shared<metrics::SparseCategoricalAccuracy>(), kLabels, 1,
       kProbabilities, kSparseCategoricalAccuracyMetric},
      {"TopKCategoricalAccuracy(k=2)", std::make_shared<metrics::TopKCategoricalAccuracy>(2), kOneHot, 3,
       kProbabilities, kTopKCategoricalAccuracyMetric},
      {"SparseTopKCategoricalAccuracy(k=2)", std::make_shared<metrics::SparseTopKCategoricalAccuracy>(2), kLabels, 1,
       kProbabilities, kSparseTopKCategoricalAccuracyMetric},
      {"Precision", std::make_shared<metrics::Precision>(), kBinaryTargets, 3, kSigmoid, kPrecisionMetric},
      {"Recall", std::make_shared<metrics::Recall>(), kBinaryTargets, 3, kSigmoid, kRecallMetric},
      {"Recall(thresholds=0.3)", std::make_shared<metrics::Recall>(0.3), kBinaryTargets, 3, kSigmoid,
       kRecallThresholdMetric},
      {"MeanSquaredError", std::make_shared<metrics::MeanSquaredError>(), kRegressionTargets, 3,
       kRegressionPredictions, kMeanSquaredErrorMetric},
      {"MeanAbsoluteError", std::make_shared<metrics::MeanAbsoluteError>(), kRegressionTargets, 3,
       kRegressionPredictions, kMeanAbsoluteErrorMetric},
      {"RootMeanSquaredError", std::make_shared<metrics::RootMeanSquaredError>(), kRegressionTargets, 3,
       kRegressionPredictions, kRootMeanSquaredErrorMetric},
      {"AUC", std::make_shared<metrics::AUC>(), kBinaryTargets, 3, kSigmoid, kAucMetric},
      {"AUC(curve=PR)", std::make_shared<metrics::AUC>(200, "PR"), kBinaryTargets, 3, kSigmoid, kAucPrMetric},
      {"AUC(10, minoring)", std::make_shared<metrics::AUC>(10, "ROC", "minoring"), kBinaryTargets, 3, kSigmoid,
       kAucMinoringMetric},
      {"AUC(20, PR, majoring)", std::make_shared<metrics::AUC>(20, "PR", "majoring"), kBinaryTargets, 3, kSigmoid,
       kAucPrMajoringMetric},
      {"AUC(from_logits)", std::make_shared<metrics::AUC>(200, "ROC", "interpolation", "auc", true), kBinaryTargets,
       3, kLogits, kAucFromLogitsMetric},
      {"AUC(multi_label)", std::make_shared<metrics::AUC>(200, "ROC", "interpolation", "auc", false, true, 3),
       kBinaryTargets, 3, kSigmoid, kAucMultiLabelMetric},
      {"AUC(PR, multi_label, label_weights)",
       std::make_shared<metrics::AUC>(200, "PR", "interpolation", "auc", false, true, 3,
                                      std::vector<double>{0.2, 1.0, 0.5}),
       kBinaryTargets, 3, kSigmoid, kAucMultiLabelWeightedPrMetric},
      {"AUC(label_weights)",
       std::make_shared<metrics::AUC>(200, "ROC", "interpolation", "auc", false, false, 0,
                                      std::vector<double>{0.2, 1.0, 0.5}),
       kBinaryTargets, 3, kSigmoid, kAucLabelWeightsMetric},
      {"Precision(top_k=2)", std::make_shared<metrics::Precision>(std::nullopt, "precision", 2), kBinaryTargets, 3,
       kSigmoid, kPrecisionTopKMetric},
      {"Recall(class_id=1)", std::make_shared<metrics::Recall>(std::nullopt, "recall", std::nullopt, 1),
       kBinaryTargets, 3, kSigmoid, kRecallClassIdMetric},
      {"Precision(0.4, top_k=2, class_id=2)", std::make_shared<metrics::Precision>(0.4, "precision", 2, 2),
       kBinaryTargets, 3, kSigmoid, kPrecisionThresholdTopKClassIdMetric},
      {"Recall(top_k=1) on logits", std::make_shared<metrics::Recall>(std::nullopt, "recall", 1), kBinaryTargets, 3,
       kLogits, kRecallTopKOnLogitsMetric},
  };
  for (const Case& test : cases) {
    Tensor first_true = rows(test.y_true, 0, test.true_columns), second_true = rows(test.y_true, 2, test.true_columns);
    if (test.true_columns == 1) {
      first_true = ops::cast(first_true, int64);
      second_true = ops::cast(second_true, int64);
    }
    test.metric->update_state(first_true, rows(test.y_pred, 0, 3));
    test.metric->update_state(second_true, rows(test.y_pred, 2, 3));
    EXPECT_NEAR(test.metric->result(), test.keras_value, 1e-6) << test.name;
    test.metric->reset_state();
    EXPECT_EQ(test.metric->result(), 0.0) << test.name << " after reset_state";
  }
  // Weighted by sample, as compile's weighted_metrics update them (Keras' values, in the
  // script's order of the same cases).
  ASSERT_EQ(cases.size(), kWeightedMetricValues.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& test = cases[i];
    Tensor first_true = rows(test.y_true, 0, test.true_columns), second_true = rows(test.y_true, 2, test.true_columns);
    if (test.true_columns == 1) {
      first_true = ops::cast(first_true, int64);
      second_true = ops::cast(second_true, int64);
    }
    test.metric->update_state(first_true, rows(test.y_pred, 0, 3), rows(kMetricSampleWeights, 0, 1));
    test.metric->update_state(second_true, rows(test.y_pred, 2, 3), rows(kMetricSampleWeights, 2, 1));
    EXPECT_NEAR(test.metric->result(), kWeightedMetricValues[i], 1e-6) << test.name << " weighted";
  }
  metrics::Mean mean;
  mean.update_state(rows(kRegressionTargets, 0, 3));
  mean.update_state(ops::slice(tensor(kRegressionTargets, {4, 3}), {2, 0}, {2, 1}));
  EXPECT_NEAR(mean.result(), kMeanMetric, 1e-6);
  expect_throw_with<ValueError>([] { metrics::AUC(200, "ROC", "interpolation", "auc", false, true); },
                                "multi_label needs num_labels >= 1");
  metrics::AUC two_labels(200, "ROC", "interpolation", "auc", false, true, 2);
  expect_throw_with<ShapeError>([&] { two_labels.update_state(Tensor::ones({4, 3}), Tensor::ones({4, 3})); },
                                "takes predictions of shape (batch, 2), got (4, 3)");
  expect_throw_with<ValueError>([] { metrics::get("auc_of_doom", metrics::LabelKind::sparse); },
                                "unknown metric 'auc_of_doom'");
  expect_throw_with<ValueError>([&] { static_cast<metrics::Metric&>(mean).update_state(Tensor::ones({2}), Tensor::ones({2})); },
                                "call update_state(values)");
}

// A metric of the user's own (Keras' Metric subclass): the share of predictions within 0.5 of
// their target.
class WithinHalf : public metrics::Metric {
 public:
  WithinHalf() : Metric("within_half") {}
  void update_state(const Tensor& y_true, const Tensor& y_pred) override {
    NoGradGuard no_grad;
    Tensor close = ops::less(ops::abs(y_pred - y_true), ops::scalar_like(y_pred, 0.5));
    add_batch(ops::sum(ops::cast(close, float64)), 1.0, double(y_pred.size()));
  }
};

TEST(KerasMetrics, ObjectsAndUserMetricsInCompileLogUnderTheirNames) {
  clear_session();
  set_random_seed(2);
  Sequential model({layers::Dense(4, "relu"), layers::Dense(1, "sigmoid")});
  auto precision = std::make_shared<metrics::Precision>();
  auto within = std::make_shared<WithinHalf>();
  model.compile(optimizers::Adam(0.01), losses::BinaryCrossentropy(),
                {"accuracy", precision, within, metrics::Recall(0.5, "recall_at_half")});
  Tensor x = testing::random_tensor({32, 3}, 4, float32);
  Tensor y = ops::cast(ops::greater(ops::sum(x, {1}, true), ops::scalar_like(x, 0.0)), float32);
  FitOptions fit;
  fit.epochs = 2;
  fit.batch_size = 8;
  fit.verbose = 0;
  History history = model.fit(x, y, fit);
  for (const char* log : {"accuracy", "precision", "within_half", "recall_at_half"}) {
    ASSERT_EQ(history.history[log].size(), 2u) << log;
  }
  // The objects hold the last epoch's state: their result() is the logged value.
  EXPECT_NEAR(precision->result(), history.history["precision"][1], 1e-12);
  EXPECT_NEAR(within->result(), history.history["within_half"][1], 1e-12);
  // "accuracy" with a binary cross-entropy is binary accuracy: a value over all elements.
  Tensor predicted = ops::cast(ops::greater(model.predict(x), ops::scalar_like(y, 0.5)), float32);
  EvaluateOptions quiet;
  quiet.verbose = 0;
  auto results = model.evaluate(x, y, quiet);
  EXPECT_NEAR(results["accuracy"], ops::mean(ops::cast(ops::equal(predicted, y), float64)).item(), 1e-12);
  expect_throw_with<ValueError>([&] { model.compile("adam", "mse", {precision, precision}); }, "is given twice");
  expect_throw_with<ValueError>([&] { model.compile("adam", "mse", {"mae", "mae"}); }, "would log as 'mae'");
  expect_throw_with<ValueError>([] { metrics::BinaryAccuracy("binary_accuracy", 1.5); }, "threshold must be in [0, 1]");
}

TEST(KerasActivations, MatchKerasByName) {
  using namespace keras::reference;
  Tensor x = tensor(kLogits, {4, 3});
  struct Case {
    const char* name;
    const std::vector<double>& keras_values;
  };
  for (const Case& test : std::vector<Case>{{"silu", kSiluActivation}, {"swish", kSiluActivation},
                                            {"leaky_relu", kLeakyReluActivation}, {"elu", kEluActivation},
                                            {"selu", kSeluActivation}, {"softplus", kSoftplusActivation}}) {
    testing::expect_close(activations::get(test.name)(x).to_vector<double>(), test.keras_values, 1e-6, test.name);
    EXPECT_TRUE(activations::is_elementwise(test.name)) << test.name;
  }
  // Usable as strings in Dense, as in Keras.
  layers::Dense dense(3, "selu");
  EXPECT_EQ(dense(x).shape(), (Shape{4, 3}));
  // softplus stays finite where log(1 + e^x) would overflow.
  EXPECT_NEAR(activations::get("softplus")(Tensor::from_vector<float>({100}, {1})).item(), 100.0, 1e-4);
}

}  // namespace
}  // namespace keras
