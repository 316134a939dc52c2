// BatchNormalization (see the header).
#include "layers/batch_normalization.h"

#include "layers/layer_config.h"

#include "engine/errors.h"
#include "engine/ops.h"

namespace keras::layers {

BatchNormalization::BatchNormalization(BatchNormalizationOptions options)
    : LayerOf("batch_normalization", options.name), options_(std::move(options)) {
  // Statistics in the variable dtype (float32 under mixed policies), the output in the compute
  // dtype: Keras' BatchNormalization does the same (autocast off).
  set_autocast(false);
  if (!(options_.momentum >= 0.0 && options_.momentum <= 1.0)) {
    throw ValueError(str("BatchNormalization: momentum must be in [0, 1], got ", options_.momentum));
  }
  if (!(options_.epsilon > 0.0)) {
    throw ValueError(str("BatchNormalization: epsilon must be positive, got ", options_.epsilon));
  }
  if (!options_.beta_initializer) options_.beta_initializer = initializers::zeros();
  if (!options_.gamma_initializer) options_.gamma_initializer = initializers::ones();
  if (!options_.moving_mean_initializer) options_.moving_mean_initializer = initializers::zeros();
  if (!options_.moving_variance_initializer) options_.moving_variance_initializer = initializers::ones();
}

void BatchNormalization::build(const Shape& input_shape) {
  const auto rank = static_cast<std::int64_t>(input_shape.size());
  if (options_.axis < -rank || options_.axis >= rank) {
    throw ValueError(str("BatchNormalization '", name(), "': axis ", options_.axis,
                         " is out of range for inputs of rank ", rank, " (shape ", shape_to_string(input_shape),
                         "); expected an axis in [", -rank, ", ", rank - 1, "]"));
  }
  axis_ = static_cast<int>(options_.axis < 0 ? options_.axis + rank : options_.axis);
  Shape shape{input_shape[static_cast<std::size_t>(axis_)]};
  if (options_.scale) gamma_ = add_weight("gamma", shape, options_.gamma_initializer);
  if (options_.center) beta_ = add_weight("beta", shape, options_.beta_initializer);
  moving_mean_ = add_weight("moving_mean", shape, options_.moving_mean_initializer, /*trainable=*/false);
  moving_variance_ = add_weight("moving_variance", shape, options_.moving_variance_initializer, /*trainable=*/false);
}

Tensor BatchNormalization::normalize(const Tensor& inputs, const Tensor& mean_in, const Tensor& variance_in) const {
  // (C) statistics broadcast along the features axis: reshaped to (1, .., C, .., 1).
  Shape features_shape(static_cast<std::size_t>(inputs.rank()), 1);
  features_shape[static_cast<std::size_t>(axis_)] = inputs.dim(axis_);
  auto along_features = [&](const Tensor& t) { return axis_ == inputs.rank() - 1 ? t : ops::reshape(t, features_shape); };
  Tensor inverse = ops::rsqrt(along_features(variance_in) + options_.epsilon);
  if (gamma_.defined()) inverse = inverse * along_features(gamma_);
  Tensor shift = -along_features(mean_in) * inverse;
  if (beta_.defined()) shift = shift + along_features(beta_);
  return inputs * inverse + shift;
}

Tensor BatchNormalization::call(const Tensor& inputs_in, bool training) {
  if (inputs_in.rank() <= axis_ || inputs_in.dim(axis_) != moving_mean_.dim(0)) {
    throw ShapeError(str("BatchNormalization '", name(), "' was built for ", moving_mean_.dim(0),
                         " features on axis ", axis_, ", got inputs of shape ", shape_to_string(inputs_in.shape())));
  }
  const bool training_statistics = training && trainable();
  const DType fused_statistics_dtype = is_half_precision(inputs_in.dtype()) ? float32 : inputs_in.dtype();
  if (training_statistics && !options_.synchronized && inputs_in.dtype() == compute_dtype() &&
      fused_statistics_dtype == moving_mean_.dtype()) {
    // One fused op (engine/ops/normalization.cpp): the same statistics and output, with the
    // 16-bit inputs read and the output written as they are and a fused gradient; measured in
    // docs/ARCHITECTURE.md, "Fused batch normalization".
    Tensor mean, variance;
    Tensor out = ops::fused_batch_normalization(inputs_in, gamma_, beta_, axis_, options_.epsilon, &mean, &variance);
    update_moving_statistics(inputs_in.dim(0), mean, variance);
    return out;
  }
  Tensor inputs = inputs_in.dtype() == moving_mean_.dtype() ? inputs_in : ops::cast(inputs_in, moving_mean_.dtype());
  if (!training_statistics) return ops::cast(normalize(inputs, moving_mean_, moving_variance_), compute_dtype());

  ops::Axes reduced;
  for (int d = 0; d < inputs.rank(); ++d) {
    if (d != axis_) reduced.push_back(d);
  }
  Shape features_shape(static_cast<std::size_t>(inputs.rank()), 1);
  features_shape[static_cast<std::size_t>(axis_)] = inputs.dim(axis_);
  auto along_features = [&](const Tensor& t) { return ops::reshape(t, features_shape); };
  // Synchronized: the statistics of the global batch, every process's rows (ops::batch_mean
  // all-reduces the sums, and sums their gradients back). Otherwise each process normalises by
  // its own rows' statistics, as one process would by its batch's.
  Tensor mean = options_.synchronized ? ops::batch_mean(inputs, reduced) : ops::mean(inputs, reduced);
  Tensor variance = options_.synchronized ? ops::batch_mean(ops::square(inputs - along_features(mean)), reduced)
                                          : ops::mean(ops::square(inputs - along_features(mean)), reduced);
  update_moving_statistics(inputs.dim(0), mean, variance);
  return ops::cast(normalize(inputs, mean, variance), compute_dtype());
}

void BatchNormalization::update_moving_statistics(std::int64_t rows, const Tensor& mean, const Tensor& variance) {
  NoGradGuard constant;
  Tensor batch_mean = mean.detach(), batch_variance = variance.detach();
  if (!options_.synchronized) {
    // The moving statistics follow the row-weighted mean of every process's statistics (a
    // process with no rows adds none): each row carries its process's (mean, variance) into
    // one batch_mean, a (rows, 2C) tensor where the activations would be (rows, H, W, C).
    const std::int64_t features = batch_mean.dim(0);
    Tensor statistics = ops::reshape(ops::concatenate({batch_mean, batch_variance}, 0), {1, 2 * features});
    Tensor weighted = ops::batch_mean(ops::broadcast_to(statistics, {rows, 2 * features}), {0});
    batch_mean = ops::slice(weighted, {0}, {features});
    batch_variance = ops::slice(weighted, {features}, {features});
  }
  const double momentum = options_.momentum;
  moving_mean_.assign(moving_mean_ * momentum + batch_mean * (1.0 - momentum));
  moving_variance_.assign(moving_variance_ * momentum + batch_variance * (1.0 - momentum));
}


nlohmann::json BatchNormalization::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["axis"] = options_.axis;
  config["momentum"] = options_.momentum;
  config["epsilon"] = options_.epsilon;
  config["center"] = options_.center;
  config["scale"] = options_.scale;
  config["beta_initializer"] = config_json::initializer(options_.beta_initializer, "zeros");
  config["gamma_initializer"] = config_json::initializer(options_.gamma_initializer, "ones");
  config["moving_mean_initializer"] = config_json::initializer(options_.moving_mean_initializer, "zeros");
  config["moving_variance_initializer"] = config_json::initializer(options_.moving_variance_initializer, "ones");
  for (const char* key : {"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"}) config[key] = nullptr;
  config["synchronized"] = options_.synchronized;
  return config;
}

LayerPtr BatchNormalization::from_config(LayerConfig& config) {
  BatchNormalizationOptions options;
  options.name = config.name();
  std::vector<std::int64_t> axis = config.integers("axis", std::vector<std::int64_t>{-1});
  if (axis.size() != 1) config.unsupported("axis", "names several axes; keras-cpp normalises over one");
  options.axis = axis[0];
  options.momentum = config.number("momentum", 0.99);
  options.epsilon = config.number("epsilon", 1e-3);
  options.center = config.boolean("center", true);
  options.scale = config.boolean("scale", true);
  options.synchronized = config.boolean("synchronized", false);
  options.beta_initializer = config.initializer("beta_initializer");
  options.gamma_initializer = config.initializer("gamma_initializer");
  options.moving_mean_initializer = config.initializer("moving_mean_initializer");
  options.moving_variance_initializer = config.initializer("moving_variance_initializer");
  for (const char* key : {"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint", "renorm_clipping"}) config.only(key);
  config.only("renorm", {false});
  config.number("renorm_momentum", 0.99);  // used by renorm only, which is refused above
  return std::make_shared<BatchNormalization>(options);
}

}  // namespace keras::layers
