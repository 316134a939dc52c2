// Keras' functional API on one process: Input and symbolic calls, Model(inputs, outputs) with
// one or several inputs and outputs, shared layers, nested models, Keras' paths and names,
// summary()'s "Connected to", the merging layers' maths, and the errors a user can cause.
#include "tests/test_helpers.h"

namespace keras {
namespace {

using testing::expect_close;
using testing::expect_throw_with;

class FunctionalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clear_session();
    set_random_seed(3);
  }
};

std::vector<double> values(const Tensor& tensor) { return tensor.to_vector<double>(); }

TEST_F(FunctionalTest, InputAndLayerCallsGiveKerasShapesAndPaths) {
  KerasTensor inputs = Input({784}, "digits");
  EXPECT_EQ(inputs.shape(), (Shape{-1, 784}));
  EXPECT_EQ(inputs.dtype(), float32);
  KerasTensor x = layers::Dense(64, "relu")(inputs);
  x = layers::Dense(64, "relu")(x);
  KerasTensor outputs = layers::Dense(10)(x);
  EXPECT_EQ(outputs.shape(), (Shape{-1, 10}));
  Model model(inputs, outputs, "mnist_model");
  EXPECT_TRUE(model.built());
  std::vector<std::string> paths;
  for (Variable* variable : model.variables()) paths.push_back(variable->path());
  // A functional model's variables carry no model name, as Keras' do.
  EXPECT_EQ(paths, (std::vector<std::string>{"dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias",
                                             "dense_2/kernel", "dense_2/bias"}));
  EXPECT_EQ(model.layers().size(), 4u);  // the InputLayer first, as Keras lists it
  EXPECT_EQ(model.layers()[0]->class_name(), "InputLayer");
  EXPECT_EQ(model.get_layer("dense_1")->name(), "dense_1");
  expect_throw_with<Error>([&] { model.get_layer("nope"); }, "has no layer named 'nope'");
  EXPECT_EQ(model.count_params(), 784 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10);
}

TEST_F(FunctionalTest, RunsTheSameMathsAsCallingTheLayersByHand) {
  auto first = std::make_shared<layers::Dense>(5, "tanh");
  auto second = std::make_shared<layers::Dense>(3);
  KerasTensor inputs = Input({4});
  Model model(inputs, (*second)((*first)(inputs)));
  Tensor x = testing::random_tensor({6, 4}, 11, float32);
  expect_close(values(model(x)), values((*second)((*first)(x))), 0.0, "line 50");
  expect_close(values(model.predict(x, 4)), values((*second)((*first)(x))), 1e-7, "line 51");
}

TEST_F(FunctionalTest, TwoInputsTwoOutputsSharedLayerAndResidual) {
  KerasTensor left = Input({6}, "left");
  KerasTensor right = Input({6}, "right");
  auto shared = std::make_shared<layers::Dense>(6, "tanh");  // one layer, called on both inputs
  KerasTensor a = (*shared)(left);
  KerasTensor b = (*shared)(right);
  KerasTensor residual = layers::Add()({a, left});
  KerasTensor joined = layers::Concatenate()({residual, b});
  layers::DenseOptions score_options, label_options;
  score_options.name = "score";
  label_options.name = "label";
  KerasTensor score = layers::Dense(1, "", score_options)(joined);
  KerasTensor label = layers::Dense(3, "softmax", label_options)(joined);
  Model model({left, right}, {score, label}, "two_towers");
  EXPECT_EQ(model.output_names(), (std::vector<std::string>{"score", "label"}));
  EXPECT_EQ(score.shape(), (Shape{-1, 1}));
  EXPECT_EQ(joined.shape(), (Shape{-1, 12}));
  Tensor l = testing::random_tensor({5, 6}, 1, float32);
  Tensor r = testing::random_tensor({5, 6}, 2, float32);
  std::vector<Tensor> outputs = model({l, r});
  ASSERT_EQ(outputs.size(), 2u);
  Tensor by_hand_a = (*shared)(l);
  Tensor by_hand_joined = ops::concatenate({by_hand_a + l, (*shared)(r)}, 1);
  auto score_layer = model.get_layer("score");
  expect_close(values(outputs[0]), values((*score_layer)(by_hand_joined)), 1e-7, "line 75");
  EXPECT_EQ(outputs[1].shape(), (Shape{5, 3}));
  // The shared layer's weights are counted once.
  EXPECT_EQ(model.count_params(), 6 * 6 + 6 + 12 * 1 + 1 + 12 * 3 + 3);
  // A model of two inputs called on one says how it is called.
  expect_throw_with<Error>([&] { model(l); }, "call it with a vector of inputs");
  expect_throw_with<Error>([&] { model(std::vector<Tensor>{l}); }, "takes 2 input(s) (left, right), but was given 1");
  expect_throw_with<Error>([&] { model({l, Tensor::zeros({5, 7})}); }, "model input 'right' expects shape (-1, 6)");
}

TEST_F(FunctionalTest, SummaryListsConnectionsAndEveryOutputShape) {
  KerasTensor left = Input({6}, "left");
  KerasTensor right = Input({6}, "right");
  layers::DenseOptions shared_options;
  shared_options.name = "shared";
  auto shared = std::make_shared<layers::Dense>(4, "", shared_options);
  KerasTensor sum = layers::Add(/*name=*/"sum")({(*shared)(left), (*shared)(right)});
  Model model({left, right}, layers::Dense(2)(sum));
  std::string text = model.summary_text();
  EXPECT_NE(text.find("Connected to"), std::string::npos) << text;
  EXPECT_NE(text.find("left (InputLayer)"), std::string::npos) << text;
  EXPECT_NE(text.find("shared[0][0]"), std::string::npos) << text;
  EXPECT_NE(text.find("shared[1][0]"), std::string::npos) << text;
  EXPECT_NE(text.find("right[0][0]"), std::string::npos) << text;
  EXPECT_NE(text.find("sum[0][0]"), std::string::npos) << text;
  EXPECT_EQ(text.find("?"), std::string::npos) << text;  // every shape is known before any data
  EXPECT_NE(text.find("(None, 2)"), std::string::npos) << text;
}

TEST_F(FunctionalTest, MapOutputsAreNamedByTheirKeysInSortedOrder) {
  KerasTensor inputs = Input({3});
  KerasTensor hidden = layers::Dense(4)(inputs);
  Model model({inputs}, std::map<std::string, KerasTensor>{{"zeta", layers::Dense(1)(hidden)},
                                                          {"alpha", layers::Dense(2)(hidden)}});
  EXPECT_EQ(model.output_names(), (std::vector<std::string>{"alpha", "zeta"}));
  std::vector<Tensor> outputs = model(std::vector<Tensor>{Tensor::ones({2, 3})});
  EXPECT_EQ(outputs[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(outputs[1].shape(), (Shape{2, 1}));
}

TEST_F(FunctionalTest, NestedModelsAreLayers) {
  KerasTensor encoder_input = Input({8}, "encoder_input");
  auto encoder = std::make_shared<Model>(encoder_input, layers::Dense(3, "relu")(encoder_input), "encoder");
  KerasTensor inputs = Input({8});
  KerasTensor code = (*encoder)(inputs);
  EXPECT_EQ(code.shape(), (Shape{-1, 3}));
  Model autoencoder(inputs, layers::Dense(8)(code), "autoencoder");
  EXPECT_EQ(autoencoder.get_layer("encoder").get(), encoder.get());
  Tensor x = testing::random_tensor({4, 8}, 7, float32);
  auto decoder = autoencoder.layers().back();
  expect_close(values(autoencoder(x)), values((*decoder)((*encoder)(x))), 1e-7, "line 123");
  EXPECT_EQ(autoencoder.count_params(), encoder->count_params() + 3 * 8 + 8);
}

TEST_F(FunctionalTest, TrainsLikeTheSameSequentialModel) {
  Tensor x = testing::random_tensor({64, 3}, 5, float32);
  Tensor y = ops::sum(x * x, {1}, true);
  set_random_seed(9);
  Sequential sequential({layers::Dense(8, "tanh"), layers::Dense(1)});
  sequential(x);
  set_random_seed(9);
  KerasTensor inputs = Input({3});
  KerasTensor hidden = layers::Dense(8, "tanh")(inputs);  // built in the Sequential's order
  Model functional(inputs, layers::Dense(1)(hidden));
  for (std::size_t i = 0; i < functional.weights().size(); ++i) {
    expect_close(values(functional.weights()[i]), values(sequential.weights()[i]), 0.0, "line 137");
  }
  sequential.compile(optimizers::SGD(0.05), "mse");
  functional.compile(optimizers::SGD(0.05), "mse");
  FitOptions options;
  options.epochs = 3;
  options.batch_size = 16;
  options.shuffle = false;
  options.verbose = 0;
  History first = sequential.fit(x, y, options);
  History second = functional.fit(x, y, options);
  expect_close(second.history["loss"], first.history["loss"], 0.0, "line 148");
}

TEST_F(FunctionalTest, MergingLayersComputeKerasResults) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor b = Tensor::from_vector<float>({4, 3, 2, 1}, {2, 2});
  expect_close(values(layers::Add()({a, b})), {5, 5, 5, 5}, 0.0, "line 154");
  expect_close(values(layers::Subtract()({a, b})), {-3, -1, 1, 3}, 0.0, "line 155");
  expect_close(values(layers::Multiply()({a, b})), {4, 6, 6, 4}, 0.0, "line 156");
  expect_close(values(layers::Average()({a, b})), {2.5, 2.5, 2.5, 2.5}, 0.0, "line 157");
  expect_close(values(layers::Maximum()({a, b})), {4, 3, 3, 4}, 0.0, "line 158");
  expect_close(values(layers::Minimum()({a, b})), {1, 2, 2, 1}, 0.0, "line 159");
  expect_close(values(layers::Concatenate()({a, b})), {1, 2, 4, 3, 3, 4, 2, 1}, 0.0, "line 160");
  expect_close(values(layers::Concatenate(0)({a, b})), {1, 2, 3, 4, 4, 3, 2, 1}, 0.0, "line 161");
  Tensor dot = layers::Dot(1)({a, b});
  EXPECT_EQ(dot.shape(), (Shape{2, 1}));
  expect_close(values(dot), {1 * 4 + 2 * 3, 3 * 2 + 4 * 1}, 0.0, "line 164");
  // normalize=True: cosine similarity per row.
  Tensor cosine = layers::Dot(1, true)({a, b});
  expect_close(values(cosine), {10 / (std::sqrt(5.0) * 5), 10 / (5 * std::sqrt(5.0))}, 1e-6, "line 167");
  // Three dimensions, axes (2, 2): (batch, 2, 3) . (batch, 4, 3) -> (batch, 2, 4).
  Tensor p = testing::random_tensor({2, 2, 3}, 1, float32);
  Tensor q = testing::random_tensor({2, 4, 3}, 2, float32);
  Tensor batched = layers::Dot(2)({p, q});
  EXPECT_EQ(batched.shape(), (Shape{2, 2, 4}));
  expect_close(values(batched), values(ops::matmul(p, ops::transpose(q, {0, 2, 1}))), 1e-6, "line 173");
}

TEST_F(FunctionalTest, MergingLayersRefuseWhatKerasRefuses) {
  Tensor a = Tensor::ones({2, 2});
  expect_throw_with<Error>([&] { layers::Add()(std::vector<Tensor>{a}); }, "takes at least 2 inputs, got 1");
  expect_throw_with<Error>([&] { layers::Subtract()({a, a, a}); }, "takes exactly 2 inputs, got 3");
  expect_throw_with<Error>([&] { layers::Add()(a); }, "merges a list of tensors and was given one");
  expect_throw_with<Error>([&] { layers::Concatenate()({a, Tensor::ones({3, 3})}); }, "input 1 has shape (3, 3)");
  expect_throw_with<Error>([&] { layers::Dot(1)({a, Tensor::ones({2, 3})}); }, "differ");
}

TEST_F(FunctionalTest, GraphErrorsNameWhatIsWrong) {
  KerasTensor first = Input({2}, "first");
  KerasTensor second = Input({2}, "second");
  KerasTensor sum = layers::Add()({first, second});
  expect_throw_with<Error>([&] { Model({first}, {sum}); }, "depends on Input 'second', which is not among the model's inputs");
  expect_throw_with<Error>([&] { Model({sum}, {sum}); }, "is not made by keras::Input");
  layers::Dense named(3);
  expect_throw_with<Error>([&] { named(first); }, "no std::shared_ptr holds it");
  expect_throw_with<Error>([&] { Input({0, 2}); }, "every dimension positive");
  expect_throw_with<Error>([&] { layers::Dense(3)(KerasTensor()); }, "undefined KerasTensor");
  // Two different layers of one name in one model: Keras refuses it too.
  layers::DenseOptions twin;
  twin.name = "twin";
  KerasTensor x = layers::Dense(2, "", twin)(first);
  KerasTensor y = layers::Dense(2, "", twin)(x);
  expect_throw_with<Error>([&] { Model(first, y); }, "layer names must be unique");
}

// Two outputs: a score (mse) and 3-class logits (cross-entropy).
struct TwoHeads {
  std::shared_ptr<Model> model;
  Tensor left, right, score, label;
};

TwoHeads two_heads() {
  KerasTensor left = Input({4}, "left");
  KerasTensor right = Input({4}, "right");
  KerasTensor hidden = layers::Dense(8, "relu")(layers::Concatenate()({left, right}));
  layers::DenseOptions score_options, label_options;
  score_options.name = "score";
  label_options.name = "label";
  KerasTensor score = layers::Dense(1, "", score_options)(hidden);
  KerasTensor label = layers::Dense(3, "", label_options)(hidden);
  TwoHeads heads;
  heads.model = std::make_shared<Model>(std::vector<KerasTensor>{left, right}, std::vector<KerasTensor>{score, label});
  heads.left = testing::random_tensor({24, 4}, 21, float32);
  heads.right = testing::random_tensor({24, 4}, 22, float32);
  heads.score = ops::sum(heads.left * heads.right, {1}, true);
  heads.label = ops::cast(ops::argmax(ops::slice(heads.left, {0, 0}, {24, 3}), 1), int64);
  return heads;
}

TEST_F(FunctionalTest, FitWithSeveralOutputsLogsEachLossAndMetricAsKeras) {
  TwoHeads heads = two_heads();
  CompileOptions options;
  options.loss = {"mse", losses::SparseCategoricalCrossentropy(true)};
  options.loss_weights = {1.0, 0.25};
  options.metrics = {{"mae"}, {"accuracy"}};
  heads.model->compile(optimizers::Adam(0.01), options);
  EXPECT_EQ(heads.model->metric_names(),
            (std::vector<std::string>{"score_loss", "label_loss", "score_mae", "label_accuracy"}));
  FitOptions fit;
  fit.epochs = 2;
  fit.batch_size = 8;
  fit.verbose = 0;
  fit.validation_data.inputs = {heads.left, heads.right};
  fit.validation_data.targets = {heads.score, heads.label};
  History history = heads.model->fit({heads.left, heads.right}, {heads.score, heads.label}, fit);
  for (const char* log : {"loss", "score_loss", "label_loss", "score_mae", "label_accuracy", "val_loss",
                          "val_score_loss", "val_label_loss", "val_score_mae", "val_label_accuracy"}) {
    ASSERT_EQ(history.history[log].size(), 2u) << log;
  }
  // The total is the weighted sum of the outputs' losses, each logged with its weight (Keras 3).
  for (std::size_t epoch = 0; epoch < 2; ++epoch) {
    EXPECT_NEAR(history.history["loss"][epoch],
                history.history["score_loss"][epoch] + history.history["label_loss"][epoch], 1e-6);
  }
  // evaluate() on the training data after fit is what the last epoch's validation said.
  EvaluateOptions quiet;
  quiet.verbose = 0;
  std::map<std::string, double> results =
      heads.model->evaluate({heads.left, heads.right}, {heads.score, heads.label}, quiet);
  EXPECT_NEAR(results["loss"], history.history["val_loss"][1], 1e-6);
  EXPECT_NEAR(results["label_accuracy"], history.history["val_label_accuracy"][1], 1e-9);
  std::vector<Tensor> predictions = heads.model->predict({heads.left, heads.right}, 5);
  ASSERT_EQ(predictions.size(), 2u);
  EXPECT_EQ(predictions[0].shape(), (Shape{24, 1}));
  EXPECT_EQ(predictions[1].shape(), (Shape{24, 3}));
  // The loss of the label head alone, checked by hand from the predictions.
  double label_loss = losses::SparseCategoricalCrossentropy(true)(heads.label, predictions[1]).item();
  EXPECT_NEAR(results["label_loss"], 0.25 * label_loss, 1e-5);
}

TEST_F(FunctionalTest, CompileByOutputNameEqualsCompileInOrder) {
  TwoHeads first = two_heads();
  clear_session();
  set_random_seed(3);
  TwoHeads second = two_heads();
  CompileOptions in_order;
  in_order.loss = {"mse", losses::SparseCategoricalCrossentropy(true)};
  in_order.loss_weights = {0.5, 2.0};
  first.model->compile(optimizers::SGD(0.05), in_order);
  CompileOptions by_name;
  by_name.loss_by_output = {{"label", losses::SparseCategoricalCrossentropy(true)}, {"score", "mse"}};
  by_name.loss_weights_by_output = {{"score", 0.5}, {"label", 2.0}};
  second.model->compile(optimizers::SGD(0.05), by_name);
  FitOptions fit;
  fit.epochs = 1;
  fit.batch_size = 8;
  fit.shuffle = false;
  fit.verbose = 0;
  History a = first.model->fit({first.left, first.right}, {first.score, first.label}, fit);
  History b = second.model->fit({second.left, second.right}, {second.score, second.label}, fit);
  expect_close(b.history["loss"], a.history["loss"], 0.0, "loss by name");
}

TEST_F(FunctionalTest, SeveralOutputsRefuseWhatDoesNotFit) {
  TwoHeads heads = two_heads();
  expect_throw_with<Error>([&] { heads.model->compile("adam", "mse", {"mae"}); }, "give its metrics per output");
  CompileOptions wrong_name;
  wrong_name.loss_by_output = {{"scores", "mse"}};
  expect_throw_with<Error>([&] { heads.model->compile("adam", wrong_name); },
                           "name output 'scores', but the model's outputs are score, label");
  CompileOptions three;
  three.loss = {"mse", "mse", "mse"};
  expect_throw_with<Error>([&] { heads.model->compile("adam", three); }, "3 losses for a model of 2 output(s)");
  CompileOptions not_a_number;
  not_a_number.loss = {"mse"};
  not_a_number.loss_weights = {1.0, std::nan("")};
  expect_throw_with<Error>([&] { heads.model->compile("adam", not_a_number); },
                           "the loss weight of output 'label' must be a finite number");
  heads.model->compile("adam", "mse");  // one loss applies to every output
  FitOptions fit;
  fit.verbose = 0;
  expect_throw_with<Error>([&] { heads.model->fit({heads.left}, {heads.score, heads.label}, fit); },
                           "takes 2 input array(s), got 1");
  expect_throw_with<Error>([&] { heads.model->fit({heads.left, heads.right}, {heads.score}, fit); },
                           "has 2 output(s) and takes one target array for each, got 1");
  Tensor short_right = ops::slice(heads.right, {0, 0}, {20, 4});
  expect_throw_with<Error>([&] { heads.model->fit({heads.left, short_right}, {heads.score, heads.label}, fit); },
                           "x[0] has 24 samples but x[1] has 20");
}

TEST_F(FunctionalTest, ReshapingLayersMoveValuesAsKeras) {
  Tensor x = testing::random_tensor({2, 3, 4}, 31, float32);
  Tensor permuted = layers::Permute({2, 1})(x);
  EXPECT_EQ(permuted.shape(), (Shape{2, 4, 3}));
  expect_close(values(permuted), values(ops::transpose(x, {0, 2, 1})), 0.0, "Permute");
  Tensor vectors = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor repeated = layers::RepeatVector(3)(vectors);
  EXPECT_EQ(repeated.shape(), (Shape{2, 3, 2}));
  expect_close(values(repeated), {1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}, 0.0, "RepeatVector");
  expect_close(values(layers::Identity()(vectors)), values(vectors), 0.0, "Identity");
  layers::Lambda square([](const Tensor& t) { return t * t; });
  expect_close(values(square(vectors)), {1, 4, 9, 16}, 0.0, "Lambda");
  // In a graph, with their shapes known at once.
  KerasTensor inputs = Input({3, 4});
  KerasTensor swapped = layers::Permute({2, 1})(inputs);
  EXPECT_EQ(swapped.shape(), (Shape{-1, 4, 3}));
  KerasTensor pooled = layers::Lambda([](const Tensor& t) { return ops::mean(t, {1}); })(swapped);
  EXPECT_EQ(pooled.shape(), (Shape{-1, 3}));
  EXPECT_EQ(layers::RepeatVector(5)(pooled).shape(), (Shape{-1, 5, 3}));
  expect_throw_with<Error>([] { layers::Permute({1, 3}); }, "must be a permutation of 1..2");
  expect_throw_with<Error>([&] { layers::RepeatVector(2)(x); }, "takes (batch, features)");
  expect_throw_with<Error>([&] { layers::Permute({2, 1})(vectors); }, "permutes 2 axes after the batch");
}

}  // namespace
}  // namespace keras
