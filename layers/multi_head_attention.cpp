// MultiHeadAttention (see the header): Keras' explicit-scores path, its equations for inputs of
// rank 3, and its mask rules.
#include "layers/multi_head_attention.h"

#include "layers/layer_config.h"

#include <cmath>

#include "engine/errors.h"
#include "engine/ops.h"

namespace keras::layers {

MultiHeadAttention::MultiHeadAttention(std::int64_t num_heads, std::int64_t key_dim,
                                       MultiHeadAttentionOptions options)
    : LayerOf("multi_head_attention", options.name),
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
    auto layer = add_layer(EinsumDense("abc,cde->abde", {-1, num_heads_, head_size}, sub));
    layer->set_dtype_policy(dtype_policy());  // Keras gives sublayers the layer's policy
    return layer;
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
  output_->set_dtype_policy(dtype_policy());
  dropout_->set_dtype_policy(dtype_policy());
}

std::vector<SavedSublayer> MultiHeadAttention::saved_sublayers() const {
  if (!query_) return {};
  return {{"query_dense", query_}, {"key_dense", key_},       {"value_dense", value_},
          {"output_dense", output_}, {"_softmax", nullptr, "softmax"}, {"_dropout_layer", dropout_}};
}

Tensor MultiHeadAttention::checked_mask(const Shape& query, const Shape& value, const Tensor& attention_mask) const {
  if (!attention_mask.defined()) return attention_mask;
  const std::int64_t batch = query[0], targets = query[1], sources = value[1];
  const Shape& shape = attention_mask.shape();
  bool fits = (shape.size() == 2 || shape.size() == 3) && shape[shape.size() - 2] == targets &&
              shape.back() == sources && (shape.size() == 2 || shape[0] == batch || shape[0] == 1);
  if (!fits) {
    throw ShapeError(str("MultiHeadAttention '", name(), "': attention_mask has shape ", shape_to_string(shape),
                         "; expected (batch, T, S) = (", batch, ", ", targets, ", ", sources, ") or (T, S) = (",
                         targets, ", ", sources, ") for a query of shape ", shape_to_string(query),
                         " and a value of shape ", shape_to_string(value)));
  }
  // (batch or 1, 1, T, S): broadcast over the heads.
  return shape.size() == 2 ? ops::reshape(attention_mask, {1, 1, targets, sources})
                           : ops::expand_dims(attention_mask, 1);
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
  if (!query_) create_sublayers(query.shape().back());
  // Whole shapes (the batch this process's rows): the mask is checked against them.
  Tensor mask = checked_mask(query.shape(), value.shape(), attention_mask);

  Tensor projected_query = (*query_)(query, training);  // (B, T, N, key_dim)
  Tensor projected_key = (*key_)(key, training);        // (B, S, N, key_dim)
  Tensor projected_value = (*value_)(value, training);  // (B, S, N, value_dim)
  Tensor attended = dot_product_attention(projected_query, projected_key, projected_value, mask,
                                         1.0 / std::sqrt(static_cast<double>(key_dim_)), use_causal_mask,
                                         dropout_.get(), training);  // (B, T, N, value_dim)
  return (*output_)(attended, training);
}

Tensor dot_product_attention(Tensor query, Tensor key, Tensor value, const Tensor& mask_in,
                             std::optional<double> scale, bool is_causal, Dropout* dropout, bool training) {
  for (const Tensor* input : {&query, &key, &value}) {
    if (!input->defined() || input->rank() != 4) {
      throw ShapeError(str("dot_product_attention: query, key and value must be (batch, sequence, heads, ",
                           "head size), got ", input->defined() ? shape_to_string(input->shape()) : "undefined"));
    }
  }
  // Written on whole tensors: under a distribution each op follows its rule (heads split stay
  // split through both einsums and the softmax: Megatron's attention, with no code of its own).
  const Shape& q = query.shape();
  const Shape& k = key.shape();
  const Shape& v = value.shape();
  if (k[1] != v[1] || k[2] != q[2] || v[2] != q[2] || k[3] != q[3]) {
    throw ShapeError(str("dot_product_attention: query ", shape_to_string(q), ", key ", shape_to_string(k),
                         " and value ", shape_to_string(v), " must agree on the heads, key and value on the "
                         "sequence, query and key on the head size"));
  }
  const double factor = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(query.dim(3)));
  Tensor scores = ops::einsum("aecd,abcd->acbe", key, query * factor);  // (B, N, T, S)
  Tensor mask = mask_in;
  if (is_causal) {
    const std::int64_t targets = query.dim(1), sources = key.dim(1);
    Tensor rows = ops::reshape(Tensor::arange(targets, int64), {targets, 1}).to(query.device());
    Tensor columns = ops::reshape(Tensor::arange(sources, int64), {1, sources}).to(query.device());
    Tensor causal = ops::greater_equal(rows, columns);
    if (mask.defined()) {
      Tensor kept = mask.dtype() == DType::bool_ ? mask.to(query.device())
                                                 : ops::greater(mask.to(query.device()), ops::scalar_like(mask, 0.5));
      mask = ops::logical_and(kept, causal);
    } else {
      mask = causal;
    }
  }
  Tensor probabilities;
  if (!mask.defined()) {
    probabilities = ops::softmax(scores, -1);
  } else {
    // The mask as an additive bias of its own small shape, -1e9 where masked (Keras sets those
    // scores to -1e9; adding it gives the same probabilities and gradients): one broadcast add
    // instead of a select over every score, forward and backward (the two selects of the
    // masked softmax were 9% of the example's step). Keras then zeroes the masked positions,
    // which matters only for a query whose every key is masked: never under the causal mask
    // alone.
    Tensor kept = mask.dtype() == DType::bool_ ? mask.to(query.device())
                                               : ops::greater(mask.to(query.device()), ops::scalar_like(mask, 0.5));
    Tensor bias = ops::where(kept, Tensor::zeros({}, scores.dtype(), scores.device()),
                             Tensor::full({}, -1e9, scores.dtype(), scores.device()));
    probabilities = ops::softmax(scores + bias, -1);
    if (mask_in.defined()) probabilities = ops::where(kept, probabilities, ops::scalar_like(probabilities, 0.0));
  }
  if (dropout != nullptr) probabilities = (*dropout)(probabilities, training);
  return ops::einsum("acbe,aecd->abcd", probabilities, value);  // (B, T, N, Hv)
}


nlohmann::json MultiHeadAttention::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["num_heads"] = num_heads_;
  config["key_dim"] = key_dim_;
  config["value_dim"] = value_dim_;
  config["dropout"] = options_.dropout;
  config["use_bias"] = options_.use_bias;
  config["output_shape"] = options_.output_shape > 0 ? nlohmann::json(options_.output_shape) : nlohmann::json();
  config["attention_axes"] = nullptr;
  config["kernel_initializer"] = config_json::initializer(options_.kernel_initializer, "glorot_uniform");
  config["bias_initializer"] = config_json::initializer(options_.bias_initializer, "zeros");
  for (const char* key : {"kernel_regularizer", "bias_regularizer", "kernel_constraint", "bias_constraint", "activity_regularizer"}) config[key] = nullptr;
  config["seed"] = options_.seed && *options_.seed < (std::uint64_t{1} << 31) ? nlohmann::json(*options_.seed) : nlohmann::json();
  return config;
}

nlohmann::json MultiHeadAttention::build_config() const {
  nlohmann::json built = Layer::build_config();
  if (built.is_null()) return built;
  // Built by a call here (self-attention) or by run_call: the query's shape serves for the value.
  return {{"shapes_dict", {{"query_shape", built["input_shape"]}, {"value_shape", built["input_shape"]}}}};
}

LayerPtr MultiHeadAttention::from_config(LayerConfig& config) {
  MultiHeadAttentionOptions options;
  options.name = config.name();
  std::int64_t num_heads = config.integer("num_heads");
  std::int64_t key_dim = config.integer("key_dim");
  options.value_dim = config.integer("value_dim", 0);
  options.dropout = config.number("dropout", 0.0);
  options.use_bias = config.boolean("use_bias", true);
  if (std::optional<nlohmann::json> output_shape = config.take("output_shape")) {
    if (output_shape->is_array() && output_shape->size() == 1) output_shape = (*output_shape)[0];
    if (!output_shape->is_number_integer() || output_shape->get<std::int64_t>() <= 0) {
      config.unsupported("output_shape", "must be one positive width (or null) in keras-cpp");
    }
    options.output_shape = output_shape->get<std::int64_t>();
  }
  // Attention over the sequence axis of (batch, sequence, features) inputs: Keras' default
  // (null), which it writes as [1] once built.
  config.only("attention_axes", {nlohmann::json::array({1}), 1});
  config.only("use_gate", {false});
  config.only("sliding_window");
  config.only("flash_attention");
  options.kernel_initializer = config.initializer("kernel_initializer");
  options.bias_initializer = config.initializer("bias_initializer");
  if (std::optional<nlohmann::json> seed = config.take("seed")) {
    if (!seed->is_number_unsigned()) config.malformed("seed", "an integer (0 or more) or null");
    options.seed = seed->get<std::uint64_t>();
  }
  for (const char* key : {"kernel_regularizer", "bias_regularizer", "kernel_constraint", "bias_constraint", "activity_regularizer"}) config.only(key);
  return std::make_shared<MultiHeadAttention>(num_heads, key_dim, options);
}

}  // namespace keras::layers
