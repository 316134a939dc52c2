"""Writes tests/reference/keras_training_surface.h: inputs and Keras 3's answers (on JAX) for
the losses, metrics and learning-rate schedules tests/training_surface_test.cpp checks, so that the
test itself needs no Python. Run it in the Keras + JAX virtual environment
(python3 benchmarks/compare_keras_jax.py creates it) after changing a case:

    KERAS_BACKEND=jax $VENV/bin/python tests/interop/make_training_surface_references.py

The header records the Keras and JAX versions that made it.
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import numpy as np  # noqa: E402
import keras  # noqa: E402
import jax  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference", "keras_training_surface.h")
rng = np.random.default_rng(20261206)
lines = []


def array(name, values):
    flat = np.asarray(values, dtype=np.float64).ravel()
    body = ", ".join(f"{v:.17g}" for v in flat)
    lines.append(f"inline const std::vector<double> {name} = {{{body}}};")


def number(name, value):
    lines.append(f"constexpr double {name} = {float(value):.17g};")


# Inputs shared by the loss cases: 4 samples, 3 classes / features.
logits = rng.normal(size=(4, 3)).astype("float32")
probabilities = np.asarray(keras.ops.softmax(logits, axis=-1), dtype="float32")
binary_targets = (rng.uniform(size=(4, 3)) > 0.5).astype("float32")
sigmoid = (1 / (1 + np.exp(-logits))).astype("float32")
one_hot = np.eye(3, dtype="float32")[rng.integers(0, 3, size=4)]
regression_targets = rng.normal(size=(4, 3)).astype("float32")
regression_predictions = (regression_targets + 1.5 * rng.normal(size=(4, 3))).astype("float32")
array("kLogits", logits)
array("kProbabilities", probabilities)
array("kBinaryTargets", binary_targets)
array("kSigmoid", sigmoid)
array("kOneHot", one_hot)
array("kRegressionTargets", regression_targets)
array("kRegressionPredictions", regression_predictions)

L = keras.losses
cases = {
    "kBinaryCrossentropy": L.BinaryCrossentropy()(binary_targets, sigmoid),
    "kBinaryCrossentropyFromLogits": L.BinaryCrossentropy(from_logits=True)(binary_targets, logits),
    "kBinaryCrossentropySmoothed": L.BinaryCrossentropy(label_smoothing=0.2)(binary_targets, sigmoid),
    "kBinaryCrossentropyFromLogitsSmoothed":
        L.BinaryCrossentropy(from_logits=True, label_smoothing=0.1)(binary_targets, logits),
    "kCategoricalCrossentropySmoothed": L.CategoricalCrossentropy(label_smoothing=0.2)(one_hot, probabilities),
    "kCategoricalCrossentropyFromLogitsSmoothed":
        L.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)(one_hot, logits),
    "kMeanAbsoluteError": L.MeanAbsoluteError()(regression_targets, regression_predictions),
    "kHuber": L.Huber()(regression_targets, regression_predictions),
    "kHuberDelta": L.Huber(delta=0.5)(regression_targets, regression_predictions),
    "kKLDivergence": L.KLDivergence()(probabilities[::-1].copy(), probabilities),
    "kCosineSimilarity": L.CosineSimilarity()(regression_targets, regression_predictions),
    "kCosineSimilarityAxis0": L.CosineSimilarity(axis=0)(regression_targets, regression_predictions),
}
for name, value in cases.items():
    number(name, np.asarray(value))

# Metrics over two batches (rows 0-1, then rows 2-3 of the inputs above): their state spans
# both, as in fit's epochs.
M = keras.metrics
labels = np.argmax(one_hot, axis=-1)
exact_targets = np.round(regression_targets)
exact_predictions = np.round(regression_predictions)
metric_cases = {
    "kAccuracyMetric": (M.Accuracy(), exact_targets, exact_predictions),
    "kBinaryAccuracyMetric": (M.BinaryAccuracy(), binary_targets, sigmoid),
    "kBinaryAccuracyThresholdMetric": (M.BinaryAccuracy(threshold=0.3), binary_targets, sigmoid),
    "kCategoricalAccuracyMetric": (M.CategoricalAccuracy(), one_hot, probabilities),
    "kSparseCategoricalAccuracyMetric": (M.SparseCategoricalAccuracy(), labels, probabilities),
    "kTopKCategoricalAccuracyMetric": (M.TopKCategoricalAccuracy(k=2), one_hot, probabilities),
    "kSparseTopKCategoricalAccuracyMetric": (M.SparseTopKCategoricalAccuracy(k=2), labels, probabilities),
    "kPrecisionMetric": (M.Precision(), binary_targets, sigmoid),
    "kRecallMetric": (M.Recall(), binary_targets, sigmoid),
    "kRecallThresholdMetric": (M.Recall(thresholds=0.3), binary_targets, sigmoid),
    "kMeanSquaredErrorMetric": (M.MeanSquaredError(), regression_targets, regression_predictions),
    "kMeanAbsoluteErrorMetric": (M.MeanAbsoluteError(), regression_targets, regression_predictions),
    "kRootMeanSquaredErrorMetric": (M.RootMeanSquaredError(), regression_targets, regression_predictions),
    "kAucMetric": (M.AUC(), binary_targets, sigmoid),
    "kAucPrMetric": (M.AUC(curve="PR"), binary_targets, sigmoid),
    "kAucMinoringMetric": (M.AUC(num_thresholds=10, summation_method="minoring"), binary_targets, sigmoid),
    "kAucPrMajoringMetric": (M.AUC(num_thresholds=20, curve="PR", summation_method="majoring"), binary_targets,
                             sigmoid),
    "kAucFromLogitsMetric": (M.AUC(from_logits=True), binary_targets, logits),
    "kAucMultiLabelMetric": (M.AUC(multi_label=True, num_labels=3), binary_targets, sigmoid),
    "kAucMultiLabelWeightedPrMetric":
        (M.AUC(curve="PR", multi_label=True, num_labels=3, label_weights=[0.2, 1.0, 0.5]), binary_targets, sigmoid),
    "kAucLabelWeightsMetric": (M.AUC(label_weights=[0.2, 1.0, 0.5]), binary_targets, sigmoid),
    "kPrecisionTopKMetric": (M.Precision(top_k=2), binary_targets, sigmoid),
    "kRecallClassIdMetric": (M.Recall(class_id=1), binary_targets, sigmoid),
    "kPrecisionThresholdTopKClassIdMetric": (M.Precision(thresholds=0.4, top_k=2, class_id=2), binary_targets, sigmoid),
    "kRecallTopKOnLogitsMetric": (M.Recall(top_k=1), binary_targets, logits),
}
array("kExactTargets", exact_targets)
array("kExactPredictions", exact_predictions)
array("kLabels", labels)
for name, (metric, y_true, y_pred) in metric_cases.items():
    metric.update_state(y_true[:2], y_pred[:2])
    metric.update_state(y_true[2:], y_pred[2:])
    number(name, np.asarray(metric.result()))
# The same metrics weighted by sample (Keras' update_state(y_true, y_pred, sample_weight)), as
# compile's weighted_metrics update them: a weight stream of its own, the draws below unchanged.
metric_weights = np.random.default_rng(8).uniform(0.0, 2.0, size=4).astype("float32")
array("kMetricSampleWeights", metric_weights)
weighted_values = []
for name, (metric, y_true, y_pred) in metric_cases.items():
    fresh = metric.__class__.from_config(metric.get_config())
    fresh.update_state(y_true[:2], y_pred[:2], sample_weight=metric_weights[:2])
    fresh.update_state(y_true[2:], y_pred[2:], sample_weight=metric_weights[2:])
    weighted_values.append(float(np.asarray(fresh.result())))
array("kWeightedMetricValues", weighted_values)
mean = M.Mean()
mean.update_state(regression_targets[:2])
mean.update_state(regression_targets[2:, :1])
number("kMeanMetric", np.asarray(mean.result()))

# Activations, by name, on the logits.
A = keras.activations
for name, function in {"kSiluActivation": A.silu, "kLeakyReluActivation": A.leaky_relu, "kEluActivation": A.elu,
                       "kSeluActivation": A.selu, "kSoftplusActivation": A.softplus}.items():
    array(name, np.asarray(function(logits)))

S = keras.optimizers.schedules
steps = [0, 1, 2, 5, 9, 10, 11, 25, 99, 100, 101, 250]
array("kScheduleSteps", steps)
schedules = {
    "kExponentialDecay": S.ExponentialDecay(0.1, 10, 0.5),
    "kExponentialDecayStaircase": S.ExponentialDecay(0.1, 10, 0.5, staircase=True),
    "kPiecewiseConstantDecay": S.PiecewiseConstantDecay([10, 100], [1.0, 0.5, 0.1]),
    "kPolynomialDecay": S.PolynomialDecay(0.1, 100),
    "kPolynomialDecaySquaredCycle": S.PolynomialDecay(0.1, 10, end_learning_rate=0.01, power=2.0, cycle=True),
    "kInverseTimeDecay": S.InverseTimeDecay(0.1, 10, 0.5),
    "kInverseTimeDecayStaircase": S.InverseTimeDecay(0.1, 10, 0.5, staircase=True),
    "kCosineDecay": S.CosineDecay(0.1, 100),
    "kCosineDecayAlpha": S.CosineDecay(0.1, 100, alpha=0.1),
    "kCosineDecayWarmup": S.CosineDecay(0.0, 100, warmup_target=0.1, warmup_steps=10),
}
for name, schedule in schedules.items():
    array(name, [float(np.asarray(schedule(step))) for step in steps])

# An SGD run whose rate follows a schedule: the weights after each of 4 steps.
weight = keras.Variable(np.array([1.0, -2.0, 3.0], dtype="float32"))
optimizer = keras.optimizers.SGD(learning_rate=S.ExponentialDecay(0.1, 1, 0.5))
trajectory = []
for _ in range(4):
    optimizer.apply([keras.ops.convert_to_tensor(np.array([1.0, 1.0, 1.0], dtype="float32"))], [weight])
    trajectory.extend(np.asarray(weight).tolist())
array("kScheduledSgdWeights", trajectory)

# Optimizers and clipping: two variables, four steps of the same gradients for each case; the
# weights (both variables, flat) after each step.
optimizer_gradients = [(rng.normal(size=3) * 2).astype("float32") for _ in range(4)]
optimizer_gradients_2 = [(rng.normal(size=(2, 2)) * 2).astype("float32") for _ in range(4)]
array("kOptimizerGradients", optimizer_gradients)
array("kOptimizerGradients2", optimizer_gradients_2)
O = keras.optimizers
optimizer_cases = {
    "kRmspropWeights": O.RMSprop(0.01),
    "kRmspropCenteredMomentumWeights": O.RMSprop(0.01, rho=0.8, momentum=0.9, centered=True),
    "kRmspropMomentumDecayWeights": O.RMSprop(0.01, momentum=0.5, weight_decay=0.1),
    "kAdagradWeights": O.Adagrad(0.1),
    "kAdagradSettingsWeights": O.Adagrad(0.1, initial_accumulator_value=0.5, epsilon=1e-5, weight_decay=0.05),
    "kSgdClipnormWeights": O.SGD(0.1, clipnorm=0.5),
    "kSgdClipvalueWeights": O.SGD(0.1, clipvalue=0.3),
    "kSgdGlobalClipnormWeights": O.SGD(0.1, global_clipnorm=0.7),
    "kAdamGlobalClipnormWeights": O.Adam(0.01, global_clipnorm=0.7),
    "kSgdAccumulatedWeights": O.SGD(0.1, momentum=0.9, gradient_accumulation_steps=2),
    "kAdamAccumulatedClippedWeights": O.Adam(0.01, gradient_accumulation_steps=2, global_clipnorm=0.7),
    "kSgdEmaWeights": O.SGD(0.1, use_ema=True, ema_momentum=0.9, ema_overwrite_frequency=3),
}
for name, optimizer in optimizer_cases.items():
    first = keras.Variable(np.array([1.0, -2.0, 3.0], dtype="float32"))
    second = keras.Variable(np.array([[0.5, -0.25], [2.0, 1.5]], dtype="float32"))
    trajectory = []
    for step in range(4):
        optimizer.apply([keras.ops.convert_to_tensor(optimizer_gradients[step]),
                         keras.ops.convert_to_tensor(optimizer_gradients_2[step])], [first, second])
        trajectory.extend(np.asarray(first).ravel().tolist() + np.asarray(second).ravel().tolist())
    if optimizer.use_ema:  # the end of fit: the variables take their averages
        optimizer.finalize_variable_values([first, second])
        trajectory.extend(np.asarray(first).ravel().tolist() + np.asarray(second).ravel().tolist())
    array(name, trajectory)

# Losses with sample weights: Keras' sum_over_batch_size, sum(losses * weights) / count.
loss_weights = rng.uniform(0.0, 2.0, size=4).astype("float32")
array("kLossSampleWeights", loss_weights)
sparse_labels = rng.integers(0, 3, size=4)
array("kSparseLabels", sparse_labels)
weighted_losses = {
    "kWeightedSparseCategoricalCrossentropy": L.SparseCategoricalCrossentropy(from_logits=True)(sparse_labels, logits, sample_weight=loss_weights),
    "kWeightedCategoricalCrossentropy": L.CategoricalCrossentropy()(one_hot, probabilities, sample_weight=loss_weights),
    "kWeightedBinaryCrossentropy": L.BinaryCrossentropy(from_logits=True)(binary_targets, logits, sample_weight=loss_weights),
    "kWeightedMeanSquaredError": L.MeanSquaredError()(regression_targets, regression_predictions, sample_weight=loss_weights),
    "kWeightedMeanAbsoluteError": L.MeanAbsoluteError()(regression_targets, regression_predictions, sample_weight=loss_weights),
    "kWeightedHuber": L.Huber()(regression_targets, regression_predictions, sample_weight=loss_weights),
    "kWeightedKLDivergence": L.KLDivergence()(one_hot, probabilities, sample_weight=loss_weights),
    "kWeightedCosineSimilarity": L.CosineSimilarity()(regression_targets, regression_predictions, sample_weight=loss_weights),
}
for name, value in weighted_losses.items():
    number(name, np.asarray(value))

# The other reductions, and ignore_class: the mean over the labels kept (padding as -1; a class
# of its own; every label ignored; a sequence's timesteps).
padded_labels = np.array([0, -1, 2, -1])
class_two_labels = np.array([2, 0, 2, 1])
sequence_logits = np.random.default_rng(7).normal(size=(2, 4, 3)).astype("float32")  # its own stream: the draws below stay as they were
sequence_labels = np.array([[0, 1, -1, -1], [2, 2, 1, -1]])
array("kPaddedLabels", padded_labels)
array("kClassTwoLabels", class_two_labels)
array("kSequenceLogits", sequence_logits)
array("kSequenceLabels", sequence_labels)
SCCE = L.SparseCategoricalCrossentropy
mse_args = (regression_targets, regression_predictions)
reduced = {
    "kMseSum": L.MeanSquaredError(reduction="sum")(*mse_args, sample_weight=loss_weights),
    "kMseMean": L.MeanSquaredError(reduction="mean")(*mse_args, sample_weight=loss_weights),
    "kMseMeanWithSampleWeight": L.MeanSquaredError(reduction="mean_with_sample_weight")(*mse_args, sample_weight=loss_weights),
    "kMseMeanWithSampleWeightUnweighted": L.MeanSquaredError(reduction="mean_with_sample_weight")(*mse_args),
    "kIgnorePadding": SCCE(from_logits=True, ignore_class=-1)(padded_labels, logits),
    "kIgnoreClassTwoWeighted": SCCE(from_logits=True, ignore_class=2)(class_two_labels, logits, sample_weight=loss_weights),
    "kIgnoreClassTwoSum": SCCE(from_logits=True, ignore_class=2, reduction="sum")(class_two_labels, logits, sample_weight=loss_weights),
    "kIgnoreClassTwoMeanWithSampleWeight":
        SCCE(from_logits=True, ignore_class=2, reduction="mean_with_sample_weight")(class_two_labels, logits, sample_weight=loss_weights),
    "kIgnoreEveryLabel": SCCE(from_logits=True, ignore_class=-1)(np.full(4, -1), logits),
    "kIgnoreInSequences": SCCE(from_logits=True, ignore_class=-1)(sequence_labels, sequence_logits),
}
for name, value in reduced.items():
    number(name, np.asarray(value))
array("kMseNone", L.MeanSquaredError(reduction=None)(*mse_args, sample_weight=loss_weights))
array("kIgnorePaddingNone", SCCE(from_logits=True, ignore_class=-1, reduction=None)(padded_labels, logits))

# fit's options against Keras' fit: a Dense(3) layer of known weights, SGD, no shuffling.
fit_x = rng.normal(size=(12, 4)).astype("float32")
fit_y = rng.integers(0, 3, size=12)
fit_sample_weight = rng.uniform(0.5, 1.5, size=12).astype("float32")
fit_kernel = (rng.normal(size=(4, 3)) * 0.5).astype("float32")
fit_bias = np.array([0.1, -0.2, 0.05], dtype="float32")
array("kFitX", fit_x)
array("kFitY", fit_y)
array("kFitSampleWeight", fit_sample_weight)
array("kFitKernel", fit_kernel)
array("kFitBias", fit_bias)


def keras_fit(loss=None, weighted_metrics=None, **options):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.layers[0].set_weights([fit_kernel, fit_bias])
    model.compile(keras.optimizers.SGD(0.1), loss or keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], weighted_metrics=weighted_metrics)
    history = model.fit(fit_x, fit_y, batch_size=4, shuffle=False, verbose=0, **options)
    weights = np.concatenate([w.ravel() for w in model.layers[0].get_weights()])
    return history, weights


# Weighted by sample; then by class, the last quarter validating every second epoch (Keras
# takes one of sample_weight and class_weight, not both).
history, weights = keras_fit(epochs=2, sample_weight=fit_sample_weight)
array("kFitSampleWeightedWeights", weights)
array("kFitSampleWeightedLoss", history.history["loss"])
history, weights = keras_fit(epochs=3, class_weight={0: 1.0, 1: 2.0, 2: 0.5}, validation_split=0.25, validation_freq=2)
array("kFitClassWeightedWeights", weights)
array("kFitClassWeightedLoss", history.history["loss"])
array("kFitClassWeightedAccuracy", history.history["accuracy"])
array("kFitClassWeightedValLoss", history.history["val_loss"])
array("kFitClassWeightedValAccuracy", history.history["val_accuracy"])
# Two batches an epoch over passes of three, from epoch 1: the second epoch runs out.
history, weights = keras_fit(epochs=3, initial_epoch=1, steps_per_epoch=2)
array("kFitStepsWeights", weights)
array("kFitStepsLoss", history.history["loss"])
array("kFitStepsEpochs", history.epoch)
# Class 2 left out of the loss's mean, a batch of 4 at a time.
history, weights = keras_fit(epochs=2, loss=SCCE(from_logits=True, ignore_class=2))
array("kFitIgnoreClassWeights", weights)
array("kFitIgnoreClassLoss", history.history["loss"])
# validation_freq as a list of epochs (1-based).
history, weights = keras_fit(epochs=4, validation_split=0.25, validation_freq=[1, 3])
array("kFitListedValLoss", history.history["val_loss"])
array("kFitListedWeights", weights)
# weighted_metrics beside metrics of the same name: "weighted_accuracy", by sample and by class.
history, weights = keras_fit(epochs=2, sample_weight=fit_sample_weight, weighted_metrics=["accuracy"])
array("kFitWeightedAccuracy", history.history["weighted_accuracy"])
array("kFitUnweightedAccuracy", history.history["accuracy"])
history, weights = keras_fit(epochs=2, class_weight={0: 1.0, 1: 2.0, 2: 0.5}, weighted_metrics=["accuracy"],
                             validation_split=0.25)
array("kFitClassWeightedWeightedAccuracy", history.history["weighted_accuracy"])
array("kFitClassWeightedValWeightedAccuracy", history.history["val_weighted_accuracy"])

# Sample weights by output (Keras' list): a two-head functional model, each head's loss and
# weighted metrics weighed by its own array; evaluate with the label head unweighted (weights of 1:
# in C++ the dict form that leaves it out).
heads_rng = np.random.default_rng(9)
heads_score = heads_rng.normal(size=(12, 1)).astype("float32")
heads_score_weight = heads_rng.uniform(0.0, 2.0, size=12).astype("float32")
heads_label_weight = heads_rng.uniform(0.0, 2.0, size=12).astype("float32")
heads_weights = [heads_rng.normal(scale=0.5, size=shape).astype("float32")
                 for shape in [(4, 5), (5,), (5, 1), (1,), (5, 3), (3,)]]
array("kHeadsScore", heads_score)
array("kHeadsScoreWeight", heads_score_weight)
array("kHeadsLabelWeight", heads_label_weight)
array("kHeadsInitialWeights", np.concatenate([w.ravel() for w in heads_weights]))
features = keras.Input((4,), name="features")
hidden = keras.layers.Dense(5, activation="tanh", name="hidden")(features)
heads = keras.Model(features, [keras.layers.Dense(1, name="score")(hidden), keras.layers.Dense(3, name="label")(hidden)])
heads.set_weights(heads_weights)
heads.compile(keras.optimizers.SGD(0.1), loss=["mse", keras.losses.SparseCategoricalCrossentropy(from_logits=True)],
              weighted_metrics=[["mae"], ["accuracy"]])
history = heads.fit(fit_x, [heads_score, fit_y], sample_weight=[heads_score_weight, heads_label_weight], batch_size=4,
                    epochs=2, shuffle=False, verbose=0)
for log in ["loss", "score_loss", "label_loss", "score_mae", "label_accuracy"]:
    array("kHeads_" + log, history.history[log])
array("kHeadsTrainedWeights", np.concatenate([w.ravel() for w in heads.get_weights()]))
evaluation = heads.evaluate(fit_x, [heads_score, fit_y], sample_weight=[heads_score_weight, np.ones(12, "float32")], batch_size=4,
                            verbose=0, return_dict=True)
for log in ["loss", "score_loss", "label_loss", "score_mae", "label_accuracy"]:
    number("kHeadsEvaluate_" + log, evaluation[log])

header = f"""// Made by tests/interop/make_training_surface_references.py with Keras {keras.__version__} on JAX
// {jax.__version__}: the inputs and Keras' answers tests/training_surface_test.cpp checks. Do not edit.
#pragma once
#include <vector>

namespace keras::reference {{

{chr(10).join(lines)}

}}  // namespace keras::reference
"""
with open(OUT, "w") as handle:
    handle.write(header)
print(f"wrote {os.path.normpath(OUT)}", file=sys.stderr)
