// MultiHeadAttention, Keras' layer of that name and weight layout: query/key/value projections
// are EinsumDense layers "abc,cde->abde" with kernels (width, num_heads, key_dim) and biases
// (num_heads, key_dim); attention_output is "abcd,cde->abe" with a kernel (num_heads,
// value_dim, width) and a bias (width,). Scores are einsum("aecd,abcd->acbe", key, query /
// sqrt(key_dim)), softmaxed over the keys with the mask (masked positions -1e9, then 0), and
// dropout applies to the probabilities in training. Inputs are (batch, sequence, width);
// attention_axes other than the sequence are not supported.
//
// Under ModelParallel the projections follow their kernels' layouts (EinsumDense's rule): with
// the query/key/value kernels split on their heads axis each process attends with its heads
// (the einsums' contraction rule keeps the heads split), and attention_output's kernel split on
// its heads axis sums the heads' contributions in one all-reduce (row-parallel), Megatron's
// layout.
#pragma once
#include <optional>

#include "layers/basic_layers.h"
#include "layers/einsum_dense.h"

namespace keras::layers {

struct MultiHeadAttentionOptions {
  std::int64_t value_dim = 0;  // 0: key_dim, as Keras' None
  double dropout = 0.0;
  bool use_bias = true;
  std::int64_t output_shape = 0;  // 0: the query's last dimension
  initializers::InitializerPtr kernel_initializer;  // default glorot_uniform
  initializers::InitializerPtr bias_initializer;    // default zeros
  std::optional<std::uint64_t> seed;                // of the dropout
  std::string name;
};

// keras.ops.dot_product_attention: softmax(query·key * scale, masked) · value for query (batch,
// T, heads, head size) and key, value (batch, S, heads, head size); returns (batch, T, heads,
// value head size). `mask` (true, or > 0.5, where a query position may attend to a key)
// broadcasts to (batch, heads, T, S); is_causal adds Keras' causal mask; scale defaults to
// 1/sqrt(head size) and multiplies the query. `dropout`, when given, drops probabilities in
// training. Written on whole tensors: under ModelParallel, inside a layer's call, each op
// follows its rule and each process attends with the heads its inputs hold.
Tensor dot_product_attention(Tensor query, Tensor key, Tensor value, const Tensor& mask = Tensor(),
                             std::optional<double> scale = std::nullopt, bool is_causal = false,
                             Dropout* dropout = nullptr, bool training = false);

class MultiHeadAttention : public LayerOf<MultiHeadAttention> {
 public:
  nlohmann::json get_config() const override;
  // Keras builds MultiHeadAttention from {"shapes_dict": {"query_shape", "value_shape"}}.
  nlohmann::json build_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  MultiHeadAttention(std::int64_t num_heads, std::int64_t key_dim, MultiHeadAttentionOptions options = {});
  // Self-attention: query = value = key = inputs, no mask.
  Tensor call(const Tensor& inputs, bool training) override;
  // Keras' call(query, value, key=None, attention_mask=None, use_causal_mask=False). The mask
  // is (batch, T, S) or (T, S), true (or > 0.5) where a query position may attend to a key.
  Tensor call(const Tensor& query, const Tensor& value, const Tensor& key, const Tensor& attention_mask,
              bool use_causal_mask, bool training);
  Tensor operator()(const Tensor& query, const Tensor& value, const Tensor& key = Tensor(),
                    const Tensor& attention_mask = Tensor(), bool use_causal_mask = false,
                    bool training = false);
  using Layer::operator();

  std::int64_t num_heads() const { return num_heads_; }
  std::int64_t key_dim() const { return key_dim_; }
  std::int64_t value_dim() const { return value_dim_; }
  EinsumDense& query_dense() { return *query_; }
  EinsumDense& key_dense() { return *key_; }
  EinsumDense& value_dense() { return *value_; }
  EinsumDense& output_dense() { return *output_; }
  // Keras' attribute names: query_dense, key_dense, value_dense, output_dense, _softmax (a
  // layer of Keras' only: an empty group) and _dropout_layer.
  std::vector<SavedSublayer> saved_sublayers() const override;

 private:
  void create_sublayers(std::int64_t query_width);
  // The attention_mask checked against the query's and value's shapes (as one process sees
  // them), as (batch or 1, 1, T, S) to broadcast over the heads.
  Tensor checked_mask(const Shape& query, const Shape& value, const Tensor& attention_mask) const;

  std::int64_t num_heads_, key_dim_, value_dim_;
  MultiHeadAttentionOptions options_;
  std::shared_ptr<EinsumDense> query_, key_, value_, output_;
  std::shared_ptr<Dropout> dropout_;
};

}  // namespace keras::layers
