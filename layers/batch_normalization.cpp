// BatchNormalization (see the header).
#include "layers/batch_normalization.h"

#include "distribution/redistribute.h"
#include "engine/errors.h"
#include "engine/ops.h"
#include "distribution/batch_shard.h"

namespace keras::layers {

BatchNormalization::BatchNormalization(BatchNormalizationOptions options)
    : Layer("batch_normalization", options.name), options_(std::move(options)) {
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
  Shape broadcast(static_cast<std::size_t>(inputs.rank()), 1);
  broadcast[static_cast<std::size_t>(axis_)] = inputs.dim(axis_);
  auto along_features = [&](const Tensor& t) { return axis_ == inputs.rank() - 1 ? t : ops::reshape(t, broadcast); };
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
  Tensor inputs = inputs_in.dtype() == moving_mean_.dtype() ? inputs_in : ops::cast(inputs_in, moving_mean_.dtype());
  if (!(training && trainable())) return normalize(inputs, moving_mean_, moving_variance_);

  ops::Axes reduced;
  for (int d = 0; d < inputs.rank(); ++d) {
    if (d != axis_) reduced.push_back(d);
  }
  const double local_count = static_cast<double>(inputs.size() / inputs.dim(axis_));
  BatchShard batch = BatchShard::current("BatchNormalization");
  Tensor mean, variance;
  double count = local_count;
  if (options_.synchronized && batch.distributed()) {
    // The global batch's statistics, both passes over all processes' rows: the sums are
    // all-reduced, and their gradients summed back (every process's loss depends on them).
    const auto& group = batch.group();
    auto global_sum = [&](const Tensor& partial) {
      return distribution::identity_with_summed_grad(distribution::all_reduce_sum(partial, group), group);
    };
    std::vector<double> total{local_count};
    batch.sum(total);
    count = total[0];
    mean = global_sum(ops::sum(inputs, reduced)) / count;
    Shape broadcast(static_cast<std::size_t>(inputs.rank()), 1);
    broadcast[static_cast<std::size_t>(axis_)] = inputs.dim(axis_);
    variance = global_sum(ops::sum(ops::square(inputs - ops::reshape(mean, broadcast)), reduced)) / count;
  } else {
    mean = ops::mean(inputs, reduced);
    Shape broadcast(static_cast<std::size_t>(inputs.rank()), 1);
    broadcast[static_cast<std::size_t>(axis_)] = inputs.dim(axis_);
    variance = ops::mean(ops::square(inputs - ops::reshape(mean, broadcast)), reduced);
  }
  {
    NoGradGuard constant;
    Tensor batch_mean = mean.detach(), batch_variance = variance.detach();
    if (!options_.synchronized && batch.distributed()) {
      // The row-weighted mean of every process's statistics (a process with no rows adds
      // none): one all-reduce of (n * mean, n * variance, n).
      const std::int64_t features = batch_mean.dim(0);
      Tensor weighted = local_count > 0
                            ? ops::concatenate({batch_mean * local_count, batch_variance * local_count,
                                                Tensor::full({1}, local_count, batch_mean.dtype(), batch_mean.device())})
                            : Tensor::zeros({2 * features + 1}, batch_mean.dtype(), batch_mean.device());
      weighted = weighted.clone();
      batch.group()->serving(weighted.device(), "BatchNormalization").all_reduce(weighted);
      Tensor rows = ops::slice(weighted, {2 * features}, {1});
      batch_mean = ops::slice(weighted, {0}, {features}) / rows;
      batch_variance = ops::slice(weighted, {features}, {features}) / rows;
    }
    const double momentum = options_.momentum;
    moving_mean_.assign(moving_mean_ * momentum + batch_mean * (1.0 - momentum));
    moving_variance_.assign(moving_variance_ * momentum + batch_variance * (1.0 - momentum));
  }
  return normalize(inputs, mean, variance);
}

}  // namespace keras::layers
