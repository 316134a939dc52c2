// Activation, Dropout, Flatten, Reshape, Embedding, LayerNormalization.
#include "layers/basic_layers.h"

#include "engine/errors.h"
#include "engine/ops.h"
#include "layers/global_batch.h"

namespace keras::layers {

Activation::Activation(const std::string& activation, const std::string& name)
    : Layer("activation", name), activation_(activations::get(activation)) {}

Tensor Activation::call(const Tensor& inputs, bool) { return activation_(inputs); }

Dropout::Dropout(double rate, std::optional<std::uint64_t> seed, const std::string& name)
    : Layer("dropout", name), rate_(rate), seed_(seed ? *seed : next_random_seed()) {
  if (!(rate >= 0.0 && rate < 1.0)) {
    throw ValueError(str("Dropout: rate must be in [0, 1), got ", rate));
  }
}

Tensor Dropout::call(const Tensor& inputs, bool training) {
  if (!training || rate_ == 0.0) return inputs;
  // A fresh Philox key per call, derived from the layer seed: reproducible, never repeating.
  RandomSpec spec{RandomDistribution::uniform, 0.0, 1.0, seed_ + 0x9E3779B97F4A7C15ull * ++calls_};
  Tensor uniform;
  const GlobalBatchRows* rows = global_batch_rows();
  if (rows != nullptr && inputs.rank() > 0 && inputs.dim(0) == rows->local) {
    // Data parallel: this process's rows of the mask one process would draw for the global batch.
    Shape full = inputs.shape();
    full[0] = rows->total;
    Shape starts(inputs.shape().size(), 0);
    starts[0] = rows->offset;
    uniform = ops::random_slice(spec, full, starts, inputs.shape(), inputs.dtype(), inputs.device());
  } else {
    uniform = ops::random(spec, inputs.shape(), inputs.dtype(), inputs.device());
  }
  Tensor keep = ops::cast(ops::greater_equal(uniform, ops::scalar_like(uniform, rate_)),
                          inputs.dtype());
  return inputs * keep * (1.0 / (1.0 - rate_));
}

Flatten::Flatten(const std::string& name) : Layer("flatten", name) {}

Tensor Flatten::call(const Tensor& inputs, bool) {
  if (inputs.rank() == 0) throw ShapeError("Flatten needs inputs with a batch axis, got a scalar");
  return ops::reshape(inputs, {inputs.dim(0), inputs.rank() == 1 ? 1 : -1});
}

Reshape::Reshape(Shape target_shape, const std::string& name)
    : Layer("reshape", name), target_shape_(std::move(target_shape)) {
  int unknown = 0;
  for (std::int64_t dim : target_shape_) {
    if (dim == -1) ++unknown;
    if (dim < -1 || dim == 0) {
      throw ValueError(str("Reshape: target shape ", shape_to_string(target_shape_),
                           " must contain positive dimensions (and at most one -1)"));
    }
  }
  if (unknown > 1) {
    throw ValueError(str("Reshape: target shape ", shape_to_string(target_shape_),
                         " has more than one -1"));
  }
}

Tensor Reshape::call(const Tensor& inputs, bool) {
  if (inputs.rank() == 0) throw ShapeError("Reshape needs inputs with a batch axis, got a scalar");
  Shape shape = {inputs.dim(0)};
  shape.insert(shape.end(), target_shape_.begin(), target_shape_.end());
  return ops::reshape(inputs, shape);
}

Embedding::Embedding(std::int64_t input_dim, std::int64_t output_dim,
                     initializers::InitializerPtr embeddings_initializer, const std::string& name)
    : Layer("embedding", name), input_dim_(input_dim), output_dim_(output_dim),
      initializer_(embeddings_initializer ? std::move(embeddings_initializer)
                                          : initializers::get("uniform")) {
  if (input_dim <= 0 || output_dim <= 0) {
    throw ValueError(str("Embedding: input_dim and output_dim must be positive, got ", input_dim,
                         " and ", output_dim));
  }
}

void Embedding::build(const Shape&) {
  embeddings_ = add_weight("embeddings", {input_dim_, output_dim_}, initializer_);
}

Tensor Embedding::call(const Tensor& inputs, bool) {
  if (inputs.dtype() != int32 && inputs.dtype() != int64) {
    throw DTypeError(str("Embedding '", name(), "' expects int32 or int64 indices, got ",
                         dtype_name(inputs.dtype())));
  }
  for (std::int64_t index : inputs.to_vector<std::int64_t>()) {
    if (index < 0 || index >= input_dim_) {
      throw ValueError(str("Embedding '", name(), "': index ", index,
                           " is out of range; expected indices in [0, ", input_dim_, ")"));
    }
  }
  return ops::take(embeddings_, inputs, 0);
}

LayerNormalization::LayerNormalization(double epsilon, bool center, bool scale,
                                       const std::string& name)
    : Layer("layer_normalization", name), epsilon_(epsilon), center_(center), scale_(scale) {
  if (!(epsilon > 0)) throw ValueError(str("LayerNormalization: epsilon must be > 0, got ", epsilon));
}

void LayerNormalization::build(const Shape& input_shape) {
  if (input_shape.empty()) throw ShapeError("LayerNormalization needs inputs of rank >= 1");
  if (scale_) gamma_ = add_weight("gamma", {input_shape.back()}, initializers::ones());
  if (center_) beta_ = add_weight("beta", {input_shape.back()}, initializers::zeros());
}

Tensor LayerNormalization::call(const Tensor& inputs_in, bool) {
  // Computes in the weights' dtype (float32), as Dense does, whatever the input dtype.
  Tensor inputs = inputs_in.dtype() == float32 ? inputs_in : ops::cast(inputs_in, float32);
  Tensor mean = ops::mean(inputs, {-1}, /*keepdims=*/true);
  Tensor centered = inputs - mean;
  Tensor variance = ops::mean(ops::square(centered), {-1}, /*keepdims=*/true);
  Tensor outputs = centered * ops::rsqrt(variance + epsilon_);
  if (gamma_.defined()) outputs = outputs * gamma_;
  if (beta_.defined()) outputs = outputs + beta_;
  return outputs;
}

}  // namespace keras::layers
