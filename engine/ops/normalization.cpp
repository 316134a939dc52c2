// fused_batch_normalization and fused_layer_normalization: BatchNormalization's training step
// and LayerNormalization's call as one op each, with their gradient rules beside them.
//
// fused_batch_normalization (TensorFlow's fused_batch_norm): three kernels do the work
// (engine/kernel_list.h): the batch statistics in one pass, the normalisation as one
// per-channel affine pass, and the gradient through the statistics in two passes; the
// per-channel arithmetic between them runs on tensors of one value per channel. 16-bit inputs
// are read and written as they are, with float32 statistics: the result equals Keras' rule
// (normalise the float32 copy, round once) without the two conversion passes.
//
// fused_layer_normalization normalises each line of the last axis in one kernel
// (engine/line_rules.h) and computes its three gradients in one more; 16-bit lines are widened
// one at a time, the statistics in float32.
//
// Operands that the sharded-op handler or autocast takes (engine/op_dispatch.h) run the same
// computation composed of the engine's ops, each of which has its sharding rule.
#include <cmath>

#include "engine/ops/op_helpers.h"

namespace keras::ops {
namespace {

constexpr const char* kName = "fused_batch_normalization";
constexpr const char* kLayerName = "fused_layer_normalization";

DType statistics_dtype(DType dtype) { return is_half_precision(dtype) ? float32 : dtype; }

void check_per_channel(const Tensor& values, const char* argument, std::int64_t channels, const Tensor& x,
                       const char* op = kName, const char* unit = "channel") {
  if (!values.defined()) return;
  detail::check_floating(values, op);
  detail::check_same_device(values, x, op);
  if (values.rank() != 1 || values.dim(0) != channels) {
    throw ShapeError(str(op, ": ", argument, " must have shape (", channels, "), one value per ", unit, " of x (shape ",
                         shape_to_string(x.shape()), "), got shape ", shape_to_string(values.shape())));
  }
}

// LayerNormalization from the engine's ops, in the statistics' dtype, rounded once.
Tensor composed_layer_normalization(const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon) {
  const DType wide_dtype = statistics_dtype(x.dtype());
  Tensor wide = x.dtype() == wide_dtype ? x : cast(x, wide_dtype);
  Tensor line_mean = mean(wide, {-1}, /*keepdims=*/true);
  Tensor centered = wide - line_mean;
  Tensor variance = mean(square(centered), {-1}, /*keepdims=*/true);
  Tensor out = centered * rsqrt(variance + epsilon);
  if (gamma.defined()) out = out * cast(gamma, wide_dtype);
  if (beta.defined()) out = out + cast(beta, wide_dtype);
  return out.dtype() == x.dtype() ? out : cast(out, x.dtype());
}

// BatchNormalization's training step from the engine's ops: mean, variance, normalise in the
// statistics' dtype, round once into x's dtype.
Tensor composed_batch_normalization(const Tensor& x, const Tensor& gamma, const Tensor& beta, int axis, double epsilon,
                Tensor* batch_mean, Tensor* batch_variance) {
  const DType wide_dtype = statistics_dtype(x.dtype());
  Tensor wide = x.dtype() == wide_dtype ? x : cast(x, wide_dtype);
  Axes reduced;
  for (int d = 0; d < x.rank(); ++d) {
    if (d != axis) reduced.push_back(d);
  }
  Shape features_shape(static_cast<std::size_t>(x.rank()), 1);
  features_shape[static_cast<std::size_t>(axis)] = x.dim(axis);
  auto along_features = [&](const Tensor& t) { return reshape(t, features_shape); };
  Tensor mean_value = mean(wide, reduced);
  Tensor variance = mean(square(wide - along_features(mean_value)), reduced);
  Tensor inverse = rsqrt(along_features(variance) + epsilon);
  if (gamma.defined()) inverse = inverse * along_features(cast(gamma, wide_dtype));
  Tensor shift = -along_features(mean_value) * inverse;
  if (beta.defined()) shift = shift + along_features(cast(beta, wide_dtype));
  if (batch_mean != nullptr) *batch_mean = mean_value.detach();
  if (batch_variance != nullptr) *batch_variance = variance.detach();
  Tensor out = wide * inverse + shift;
  return out.dtype() == x.dtype() ? out : cast(out, x.dtype());
}

}  // namespace

Tensor fused_batch_normalization(const Tensor& x, const Tensor& gamma, const Tensor& beta, std::int64_t axis_in,
                                 double epsilon, Tensor* batch_mean, Tensor* batch_variance) {
  detail::check_defined(x, kName, "x");
  detail::check_floating(x, kName);
  if (x.rank() == 0) throw ValueError(str(kName, " needs x of rank >= 1 (a channel axis), got a scalar"));
  const int axis = normalize_axis(axis_in, x.rank(), kName);
  if (!(epsilon > 0) || !std::isfinite(epsilon)) {
    throw ValueError(str(kName, ": epsilon must be positive and finite, got ", epsilon));
  }
  const std::int64_t channels = x.dim(axis);
  check_per_channel(gamma, "gamma", channels, x);
  check_per_channel(beta, "beta", channels, x);
  if (detail::goes_through_handler({&x, &gamma, &beta})) {
    return composed_batch_normalization(x, gamma, beta, axis, epsilon, batch_mean, batch_variance);
  }

  const DType wide_dtype = statistics_dtype(x.dtype());
  Backend& backend = backend_for(x.device());
  Tensor mean_value = Tensor::empty({channels}, wide_dtype, x.device());
  Tensor variance = Tensor::empty({channels}, wide_dtype, x.device());
  backend.batch_normalization_statistics(x, axis, mean_value, variance);
  // gamma and beta in the statistics' dtype (float32 variables under a 16-bit policy); the cast
  // carries their gradients back.
  Tensor scale = gamma.defined() ? cast(gamma, wide_dtype) : Tensor();
  Tensor offset = beta.defined() ? cast(beta, wide_dtype) : Tensor();
  Tensor inverse, multiplier, shift;
  {
    NoGradGuard per_channel_values;
    inverse = rsqrt(variance + epsilon);
    multiplier = scale.defined() ? inverse * scale.detach() : inverse;
    shift = -mean_value * multiplier;
    if (offset.defined()) shift = shift + offset.detach();
  }
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend.channel_affine(x, multiplier, shift, axis, out);
  if (batch_mean != nullptr) *batch_mean = mean_value;
  if (batch_variance != nullptr) *batch_variance = variance;

  std::vector<Tensor> inputs{x};
  if (scale.defined()) inputs.push_back(scale);
  if (offset.defined()) inputs.push_back(offset);
  Tensor saved_x = x.detach();
  Tensor saved_scale = scale.defined() ? scale.detach() : Tensor::ones({channels}, wide_dtype, x.device());
  const bool has_scale = scale.defined(), has_offset = offset.defined();
  return record_gradient(out, kName, inputs,
                         [saved_x, saved_scale, mean_value, inverse, axis, has_scale, has_offset](const Tensor& g_in) {
    NoGradGuard per_channel_values;
    Tensor g = g_in.dtype() == saved_x.dtype() ? g_in : cast(g_in, saved_x.dtype());
    Tensor input_gradient = Tensor::empty(saved_x.shape(), saved_x.dtype(), saved_x.device());
    Tensor gradient_sum = Tensor::empty(mean_value.shape(), mean_value.dtype(), saved_x.device());
    Tensor centered_gradient_sum = Tensor::empty(mean_value.shape(), mean_value.dtype(), saved_x.device());
    backend_for(saved_x.device())
        .batch_normalization_gradient(saved_x, g, mean_value, inverse, saved_scale, axis, input_gradient,
                                      gradient_sum, centered_gradient_sum);
    std::vector<Tensor> gradients{input_gradient};
    if (has_scale) gradients.push_back(centered_gradient_sum * inverse);
    if (has_offset) gradients.push_back(gradient_sum);
    return gradients;
  });
}

Tensor fused_layer_normalization(const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon) {
  detail::check_defined(x, kLayerName, "x");
  detail::check_floating(x, kLayerName);
  if (x.rank() == 0) throw ValueError(str(kLayerName, " needs x of rank >= 1 (a features axis), got a scalar"));
  if (!(epsilon > 0) || !std::isfinite(epsilon)) {
    throw ValueError(str(kLayerName, ": epsilon must be positive and finite, got ", epsilon));
  }
  const std::int64_t features = x.shape().back();
  check_per_channel(gamma, "gamma", features, x, kLayerName, "feature (last axis)");
  check_per_channel(beta, "beta", features, x, kLayerName, "feature (last axis)");
  if (detail::goes_through_handler({&x, &gamma, &beta})) return composed_layer_normalization(x, gamma, beta, epsilon);

  const DType wide_dtype = statistics_dtype(x.dtype());
  Shape lines_shape = x.shape();
  lines_shape.pop_back();
  Tensor scale = gamma.defined() ? cast(gamma, wide_dtype) : Tensor();
  Tensor offset = beta.defined() ? cast(beta, wide_dtype) : Tensor();
  Tensor scale_values = scale.defined() ? scale.detach() : Tensor::ones({features}, wide_dtype, x.device());
  Tensor offset_values = offset.defined() ? offset.detach() : Tensor::zeros({features}, wide_dtype, x.device());
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor line_mean = Tensor::empty(lines_shape, wide_dtype, x.device());
  Tensor inverse = Tensor::empty(lines_shape, wide_dtype, x.device());
  backend_for(x.device()).layer_normalization(x, scale_values, offset_values, epsilon, out, line_mean, inverse);

  std::vector<Tensor> inputs{x};
  if (scale.defined()) inputs.push_back(scale);
  if (offset.defined()) inputs.push_back(offset);
  Tensor saved_x = x.detach();
  const bool has_scale = scale.defined(), has_offset = offset.defined();
  return record_gradient(out, kLayerName, inputs,
                         [saved_x, scale_values, line_mean, inverse, has_scale, has_offset](const Tensor& g_in) {
    NoGradGuard kernels_only;
    Tensor g = g_in.dtype() == saved_x.dtype() ? g_in : cast(g_in, saved_x.dtype());
    Tensor input_gradient = Tensor::empty(saved_x.shape(), saved_x.dtype(), saved_x.device());
    Tensor gamma_gradient = Tensor::empty(scale_values.shape(), scale_values.dtype(), saved_x.device());
    Tensor beta_gradient = Tensor::empty(scale_values.shape(), scale_values.dtype(), saved_x.device());
    backend_for(saved_x.device())
        .layer_normalization_gradient(saved_x, g, line_mean, inverse, scale_values, input_gradient, gamma_gradient,
                                      beta_gradient);
    std::vector<Tensor> gradients{input_gradient};
    if (has_scale) gradients.push_back(gamma_gradient);
    if (has_offset) gradients.push_back(beta_gradient);
    return gradients;
  });
}

}  // namespace keras::ops
