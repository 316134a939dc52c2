// MultiHeadAttention (see the header): Keras' explicit-scores path, its equations for inputs of
// rank 3, and its mask rules.
#include "layers/multi_head_attention.h"

#include <cmath>

#include "engine/errors.h"
#include "engine/ops.h"

namespace keras::layers {

MultiHeadAttention::MultiHeadAttention(std::int64_t num_heads, std::int64_t key_dim,
                                       MultiHeadAttentionOptions options)
    : Layer("multi_head_attention", options.name),
      num_heads_(num_heads),
      key_dim_(key_dim),
      value_dim_(options.value_dim > 0 ? options.value_dim : key_dim),
      options_(std::move(options)) {
  if (num_heads <= 0) throw ValueError(str("MultiHeadAttention: num_heads must be positive, got ", num_heads));
  if (key_dim <= 0) throw ValueError(str("MultiHeadAttention: key_dim must be positive, got ", key_dim));
  if (options_.value_dim < 0) {
    throw ValueError(str("MultiHeadAttention: value_dim must be positive (or 0 for key_dim), got ",
                         options_.value_dim));
  }
  if (!(options_.dropout >= 0.0 && options_.dropout < 1.0)) {
    throw ValueError(str("MultiHeadAttention: dropout must be in [0, 1), got ", options_.dropout));
  }
  if (options_.output_shape < 0) {
    throw ValueError(str("MultiHeadAttention: output_shape must be positive (or 0 for the query's "
                         "width), got ", options_.output_shape));
  }
}

void MultiHeadAttention::create_sublayers(std::int64_t query_width) {
  auto projection = [&](const std::string& name, std::int64_t head_size) {
    EinsumDenseOptions sub;
    sub.bias_axes = options_.use_bias ? "de" : "";
    sub.kernel_initializer = options_.kernel_initializer;
    sub.bias_initializer = options_.bias_initializer;
    sub.name = name;
    return add_layer(EinsumDense("abc,cde->abde", {-1, num_heads_, head_size}, sub));
  };
  query_ = projection("query", key_dim_);
  key_ = projection("key", key_dim_);
  value_ = projection("value", value_dim_);
  EinsumDenseOptions out;
  out.bias_axes = options_.use_bias ? "e" : "";
  out.kernel_initializer = options_.kernel_initializer;
  out.bias_initializer = options_.bias_initializer;
  out.name = "attention_output";
  output_ = add_layer(EinsumDense("abcd,cde->abe", {-1, options_.output_shape > 0 ? options_.output_shape : query_width}, out));
  dropout_ = add_layer(Dropout(options_.dropout, options_.seed, "dropout"));
}

Tensor MultiHeadAttention::combined_mask(const Tensor& query, const Tensor& value, const Tensor& attention_mask,
                                         bool use_causal_mask) const {
  const std::int64_t batch = query.dim(0), targets = query.dim(1), sources = value.dim(1);
  Tensor mask;
  if (attention_mask.defined()) {
    const Shape& shape = attention_mask.shape();
    bool fits = (shape.size() == 2 || shape.size() == 3) && shape[shape.size() - 2] == targets &&
                shape.back() == sources && (shape.size() == 2 || shape[0] == batch || shape[0] == 1);
    if (!fits) {
      throw ShapeError(str("MultiHeadAttention '", name(), "': attention_mask has shape ", shape_to_string(shape),
                           "; expected (batch, T, S) = (", batch, ", ", targets, ", ", sources, ") or (T, S) = (",
                           targets, ", ", sources, ") for a query of shape ", shape_to_string(query.shape()),
                           " and a value of shape ", shape_to_string(value.shape())));
    }
    mask = attention_mask.to(query.device());
    if (mask.dtype() != DType::bool_) mask = ops::greater(mask, ops::scalar_like(mask, 0.5));
    if (shape.size() == 2) mask = ops::expand_dims(mask, 0);
  }
  if (use_causal_mask) {
    // Keras' causal mask: query position i attends to key positions j <= i, shape (1, T, S).
    Tensor rows = ops::reshape(Tensor::arange(targets, int64), {1, targets, 1}).to(query.device());
    Tensor columns = ops::reshape(Tensor::arange(sources, int64), {1, 1, sources}).to(query.device());
    Tensor causal = ops::greater_equal(rows, columns);
    mask = mask.defined() ? ops::logical_and(mask, causal) : causal;
  }
  return mask;
}

Tensor MultiHeadAttention::call(const Tensor& inputs, bool training) {
  return call(inputs, inputs, Tensor(), Tensor(), false, training);
}

Tensor MultiHeadAttention::operator()(const Tensor& query, const Tensor& value, const Tensor& key,
                                      const Tensor& attention_mask, bool use_causal_mask, bool training) {
  return run_call([&] { return call(query, value, key, attention_mask, use_causal_mask, training); });
}

Tensor MultiHeadAttention::call(const Tensor& query, const Tensor& value, const Tensor& key_in,
                                const Tensor& attention_mask, bool use_causal_mask, bool training) {
  if (!query.defined() || !value.defined()) {
    throw ValueError(str("MultiHeadAttention '", name(), "' needs a query and a value"));
  }
  const Tensor& key = key_in.defined() ? key_in : value;
  for (const Tensor* input : {&query, &value, &key}) {
    if (input->rank() != 3) {
      throw NotImplementedError(str("MultiHeadAttention '", name(), "': inputs of shape ",
                                    shape_to_string(input->shape()), "; only (batch, sequence, features) "
                                    "inputs are supported (attention over one axis)"));
    }
  }
  if (key.dim(1) != value.dim(1)) {
    throw ValueError(str("MultiHeadAttention '", name(), "': all dimensions of `value` and `key`, except the "
                         "last one, must be equal. Received: value_shape=", shape_to_string(value.shape()),
                         " and key_shape=", shape_to_string(key.shape())));
  }
  std::optional<distribution::ShardingContext> sharded = distribution::ShardingContext::current();
  if (!query_) create_sublayers(sharded ? sharded->logical_shape(query).back() : query.shape().back());
  Tensor mask = combined_mask(query, value, attention_mask, use_causal_mask);

  Tensor projected_query = (*query_)(query, training);  // (B, T, N, key_dim)
  Tensor projected_key = (*key_)(key, training);        // (B, S, N, key_dim)
  Tensor projected_value = (*value_)(value, training);  // (B, S, N, value_dim)
  if (sharded) {
    // No heads-split rule yet (see the header): the attention runs on whole heads.
    projected_query = sharded->to_data_layout(projected_query);
    projected_key = sharded->to_data_layout(projected_key);
    projected_value = sharded->to_data_layout(projected_value);
  }
  Tensor scaled_query = projected_query * (1.0 / std::sqrt(static_cast<double>(key_dim_)));
  Tensor scores = ops::einsum("aecd,abcd->acbe", projected_key, scaled_query);  // (B, N, T, S)
  Tensor probabilities = mask.defined() ? Softmax::masked_softmax(scores, ops::expand_dims(mask, 1), -1)
                                        : ops::softmax(scores, -1);
  probabilities = (*dropout_)(probabilities, training);
  Tensor attended = ops::einsum("acbe,aecd->abcd", probabilities, projected_value);  // (B, T, N, value_dim)
  return (*output_)(attended, training);
}

}  // namespace keras::layers
