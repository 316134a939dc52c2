// The model-parallel table's transformer rows: a small decoder block over token ids, sharded as
// users shard transformers: attention split by heads (Megatron), on a batch x model mesh,
// keras-hub's Gemma and Llama layout maps as written, masks, EinsumDense with bias_axes,
// sequence-parallel normalisation, vocabulary-parallel cross-entropy and attention dropout.
// Each row trains 5 Adam steps on one process and under ModelParallel and must give the same
// losses and weights (model_parallel_tests.cpp).
#include "tests/mpi/model_parallel_table.h"

namespace keras::model_parallel_table {
namespace {

struct BlockOptions {
  bool causal = true;
  bool padding_mask = false;   // token ids below 3 are padding: keys there are masked
  double attention_dropout = 0.0;
  bool rms_norm = true;
};

// A Llama-style block with Keras' MultiHeadAttention, named as keras-hub's Llama names its
// weights (transformer_layer_0/self_attention/query/kernel, feedforward_gate_dense, ...):
// pre-norm attention and a gated feed-forward, both residual, then a classifier head.
class LlamaStyleBlock : public Model {
 public:
  explicit LlamaStyleBlock(BlockOptions options) : Model("transformer_layer_0"), options_(options) {
    embedding_ = add_layer(layers::Embedding(24, 8, nullptr, "token_embedding"));
    attention_norm_ = norm("self_attention_layernorm");
    layers::MultiHeadAttentionOptions attention;
    // No biases, as Llama has none. (A key bias would have a gradient of exactly zero: it adds
    // the same amount to every score of a query, which the softmax ignores; Adam then turns
    // rounding noise into full-size steps, different on every layout.)
    attention.use_bias = false;
    attention.dropout = options.attention_dropout;
    // Seed 17 left one gate weight whose gradient is nearly zero: Adam turned the sums' rounding
    // (Gloo's order on 4 processes, Debug) into a 1.07e-5 difference after 5 steps. With 23 every
    // weight of the dropout row stays within 2.5e-6 on MPI and Gloo, 2 and 4 processes, Debug.
    attention.seed = 23;
    attention.name = "self_attention";
    attention_ = add_layer(layers::MultiHeadAttention(4, 2, attention));
    feedforward_norm_ = norm("feedforward_layernorm");
    gate_ = add_layer(layers::Dense(16, "", named("feedforward_gate_dense")));
    intermediate_ = add_layer(layers::Dense(16, "", named("feedforward_intermediate_dense")));
    output_ = add_layer(layers::Dense(8, "", named("feedforward_output_dense")));
    flatten_ = add_layer(layers::Flatten("flatten"));
    head_ = add_layer(layers::Dense(4, "", named("head")));
  }
  Tensor call(const Tensor& tokens, bool training) override {
    Tensor x = (*embedding_)(tokens, training);
    Tensor mask;
    if (options_.padding_mask) {
      // (batch, T, S): every query position may attend to the keys that are not padding.
      Tensor keep = ops::greater_equal(tokens, ops::scalar_like(tokens, 3));
      mask = ops::broadcast_to(ops::expand_dims(keep, 1), {tokens.dim(0), tokens.dim(1), tokens.dim(1)});
    }
    Tensor normed = (*attention_norm_)(x, training);
    x = x + (*attention_)(normed, normed, Tensor(), mask, options_.causal, training);
    Tensor hidden = (*feedforward_norm_)(x, training);
    x = x + (*output_)(ops::silu((*gate_)(hidden, training)) * (*intermediate_)(hidden, training), training);
    return (*head_)((*flatten_)(x, training), training);
  }

 private:
  LayerPtr norm(const std::string& name) {
    if (options_.rms_norm) return add_layer(layers::RMSNormalization(1e-6, name));
    return add_layer(layers::LayerNormalization(1e-5, true, true, name));
  }
  BlockOptions options_;
  std::shared_ptr<layers::Embedding> embedding_;
  LayerPtr attention_norm_, feedforward_norm_;
  std::shared_ptr<layers::MultiHeadAttention> attention_;
  std::shared_ptr<layers::Dense> gate_, intermediate_, output_, head_;
  std::shared_ptr<layers::Flatten> flatten_;
};

// Gemma's attention as keras-hub writes it: EinsumDense projections with kernels (heads,
// hidden, head size) and an output kernel (heads, head size, hidden), and dot-product attention.
// With `biases`, the query and value projections get (heads, head size) biases and the output
// one over the hidden axis (EinsumDense's bias_axes; a key bias would change no score).
class GemmaStyleAttention : public Layer {
 public:
  explicit GemmaStyleAttention(bool biases = false) : Layer("attention", "attention") {
    auto projection = [&](const std::string& name, bool bias) {
      layers::EinsumDenseOptions options;
      options.name = name;
      if (bias) options.bias_axes = "nh";
      options.bias_initializer = initializers::get("glorot_uniform");
      return add_layer(layers::EinsumDense("btd,ndh->btnh", {-1, 4, 2}, options));
    };
    query_ = projection("query", biases);
    key_ = projection("key", false);
    value_ = projection("value", biases);
    layers::EinsumDenseOptions output;
    output.name = "attention_output";
    // (Assigning a one-letter literal trips a false -Wrestrict in GCC 12's string.)
    output.bias_axes = std::string(biases ? 1 : 0, 'd');
    output_ = add_layer(layers::EinsumDense("btnh,nhd->btd", {-1, 8}, output));
  }
  Tensor call(const Tensor& x, bool training) override {
    Tensor attended = layers::dot_product_attention((*query_)(x, training), (*key_)(x, training),
                                                    (*value_)(x, training), Tensor(), std::nullopt,
                                                    /*is_causal=*/true);
    return (*output_)(attended, training);
  }

 private:
  std::shared_ptr<layers::EinsumDense> query_, key_, value_, output_;
};

// A Gemma-style block: keras-hub's Gemma weight names (decoder_block_0/attention/...,
// ffw_gating, ffw_linear) with a GELU feed-forward.
class GemmaStyleBlock : public Model {
 public:
  explicit GemmaStyleBlock(bool biases = false) : Model("decoder_block_0") {
    embedding_ = add_layer(layers::Embedding(24, 8, nullptr, "token_embedding"));
    norm_ = add_layer(layers::RMSNormalization(1e-6, "pre_attention_norm"));
    attention_ = add_layer(GemmaStyleAttention(biases));
    gating_ = add_layer(layers::Dense(16, "gelu", named("ffw_gating")));
    linear_ = add_layer(layers::Dense(8, "", named("ffw_linear")));
    flatten_ = add_layer(layers::Flatten("flatten"));
    head_ = add_layer(layers::Dense(4, "", named("head")));
  }
  Tensor call(const Tensor& tokens, bool training) override {
    Tensor x = (*embedding_)(tokens, training);
    x = x + (*attention_)((*norm_)(x, training), training);
    x = x + (*linear_)((*gating_)(x, training), training);
    return (*head_)((*flatten_)(x, training), training);
  }

 private:
  std::shared_ptr<layers::Embedding> embedding_;
  std::shared_ptr<layers::RMSNormalization> norm_;
  std::shared_ptr<GemmaStyleAttention> attention_;
  std::shared_ptr<layers::Dense> gating_, linear_, head_;
  std::shared_ptr<layers::Flatten> flatten_;
};

std::function<std::shared_ptr<Model>()> llama_block(BlockOptions options = {}) {
  return [options] { return std::make_shared<LlamaStyleBlock>(options); };
}

// Megatron's attention layout on Keras' kernels: query/key/value (hidden, heads, head size)
// split on heads, attention_output (heads, head size, hidden) split on heads; the
// feed-forward pair by columns, then rows.
void heads_split(kd::LayoutMap& map) {
  map[".*self_attention/(query|key|value)/kernel"] = {std::nullopt, "model", std::nullopt};
  map[".*self_attention/(query|key|value)/bias"] = {"model", std::nullopt};
  map[".*attention_output/kernel"] = {"model", std::nullopt, std::nullopt};
  map[".*feedforward_(gate|intermediate)_dense/kernel"] = {std::nullopt, "model"};
  map[".*feedforward_output_dense/kernel"] = {"model", std::nullopt};
}

}  // namespace

std::vector<Case> transformer_cases() {
  return {
      {"attention_heads_split", model_axis, heads_split, llama_block(), true},
      {"attention_heads_on_a_batch_by_model_mesh", batch_by_model, heads_split, llama_block(), true},
      {"keras_hub_gemma_map_as_written", batch_by_model,
       [](kd::LayoutMap& map) {
         // keras_hub GemmaBackbone.get_layout_map, with model_parallel_dim_name="model" and
         // data_parallel_dim_name="batch".
         map["token_embedding/embeddings"] = {"model", "batch"};
         map[".*attention.*(query|key|value).kernel"] = {"model", "batch", std::nullopt};
         map[".*attention_output.kernel"] = {"model", std::nullopt, "batch"};
         map[".*ffw_gating.*kernel"] = {"batch", "model"};
         map[".*ffw_linear.kernel"] = {"model", "batch"};
       },
       [] { return std::make_shared<GemmaStyleBlock>(); }, true},
      {"keras_hub_llama_map_as_written", model_axis,
       [](kd::LayoutMap& map) {
         // keras_hub LlamaBackbone.get_layout_map("model", "batch").
         map["token_embedding/embeddings"] = {"model", "batch"};
         map["transformer_layer.*self_attention.*(query|key|value).kernel"] = {"model", "batch", std::nullopt};
         map["transformer_layer.*attention_output.kernel"] = {"model", std::nullopt, "batch"};
         map["transformer_layer.*feedforward_intermediate_dense.kernel"] = {"batch", "model"};
         map["transformer_layer.*feedforward_gate_dense.kernel"] = {"batch", "model"};
         map["transformer_layer.*feedforward_output_dense.kernel"] = {"model", "batch"};
       },
       llama_block(), true},
      {"causal_and_padding_masks", model_axis, heads_split,
       llama_block({.causal = true, .padding_mask = true}), true},
      {"einsum_dense_bias_axes_split", model_axis,
       [](kd::LayoutMap& map) {
         // Heads split, and the projections' (heads, head size) biases split with them; the
         // output's hidden-axis bias split by columns while its kernel is split by rows.
         map[".*attention/(query|key|value)/kernel"] = {"model", std::nullopt, std::nullopt};
         map[".*attention/(query|value)/bias"] = {"model", std::nullopt};
         map[".*attention_output/kernel"] = {"model", std::nullopt, std::nullopt};
         map[".*attention_output/bias"] = {"model"};
       },
       [] { return std::make_shared<GemmaStyleBlock>(/*biases=*/true); }, true},
      {"sequence_parallel_norm", model_axis,
       [](kd::LayoutMap& map) {
         heads_split(map);
         // Megatron's sequence parallelism: the residual stream, and so the norms and their
         // outputs, split along the sequence; the row-parallel layers' sums reduce-scattered
         // into that split instead of all-reduced.
         map[".*token_embedding/output"] = {"batch", "model", std::nullopt};
         map[".*attention_output/output"] = {"batch", "model", std::nullopt};
         map[".*feedforward_output_dense/output"] = {"batch", "model", std::nullopt};
       },
       llama_block({.rms_norm = false}), true},
      {"vocabulary_parallel_cross_entropy", model_axis,
       [](kd::LayoutMap& map) {
         heads_split(map);
         // The classifier's logits split by class: the loss runs on each process's block of
         // them (three small all-reduces) instead of gathering them.
         map[".*head/kernel"] = {std::nullopt, "model"};
         map[".*head/bias"] = {"model"};
       },
       llama_block(), true},
      // Each process draws its heads' block of the one-process dropout masks.
      {"attention_dropout_with_heads_split", batch_by_model, heads_split,
       llama_block({.attention_dropout = 0.3}), true},
  };
}

}  // namespace keras::model_parallel_table

// Layouts a transformer cannot take, each a ValueError naming the variable: heads that the
// model axis does not divide, and a size-1 axis that a layout shards (keras-hub's Gemma map
// on a model with one key/value head: keras-hub issue 1613 is that crash).
#include <gtest/gtest.h>

#include "tests/test_helpers.h"

namespace keras::model_parallel_table {
namespace {

void build_under(const std::function<void(kd::LayoutMap&)>& layouts, const std::function<void()>& build) {
  clear_session();
  auto map = std::make_shared<kd::LayoutMap>(model_axis(size()));
  layouts(*map);
  kd::set_distribution(std::make_shared<kd::ModelParallel>(map));
  try {
    build();
  } catch (...) {
    kd::set_distribution(nullptr);
    throw;
  }
  kd::set_distribution(nullptr);
}

TEST(TransformerParallelErrors, HeadsTheModelAxisDoesNotDivideAreNamed) {
  Tensor x = Tensor::zeros({kBatch, 4, 8});
  testing::expect_throw_with<ValueError>(
      [&] {
        build_under([](kd::LayoutMap& map) { map[".*query/kernel"] = {std::nullopt, "model", std::nullopt}; },
                    [&] {
                      layers::MultiHeadAttention attention(3, 2);  // 3 heads over 2 or 4 processes
                      attention(x, x);
                    });
      },
      "multi_head_attention/query/kernel");
  // One key/value head under keras-hub's Gemma layout: the heads axis has size 1.
  testing::expect_throw_with<ValueError>(
      [&] {
        build_under([](kd::LayoutMap& map) { map[".*key.kernel"] = {"model", "batch", std::nullopt}; },
                    [&] {
                      layers::EinsumDenseOptions options;
                      options.name = "key";
                      layers::EinsumDense key("btd,ndh->btnh", {-1, 1, 2}, options);
                      key(x);
                    });
      },
      "variable 'key/kernel'");
}

// Cross-entropy on logits split by class gathers no logits: over the model axis the step moves
// the rows' sums (all-reduces) and, for the softmax's common shift, one maximum per row from each
// process (an all-gather of rows x processes values, where the logits would be rows x classes).
TEST(TransformerParallelLoss, LogitsSplitByClassAreNotGathered) {
  clear_session();
  set_random_seed(4);
  auto map = std::make_shared<kd::LayoutMap>(model_axis(size()));
  (*map)[".*head/kernel"] = {std::nullopt, "model"};
  (*map)[".*head/bias"] = {"model"};
  kd::set_distribution(std::make_shared<kd::ModelParallel>(map));
  Sequential model({layers::Dense(8, "relu", named("hidden")), layers::Dense(4, "", named("head"))}, "classifier");
  model.compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true));
  Tensor x = ops::random({RandomDistribution::normal, 0, 1, 5}, {kBatch, 6});
  Tensor y = ops::cast(ops::random({RandomDistribution::uniform, 0, 4, 6}, {kBatch}, float64), int64);
  double sharded_loss = model.train_on_batch(x, y);
  int gathers = 0;
  for (const kd::CollectiveTotal& total : model.last_step_collectives()) {
    if (total.kind != "all_gather") continue;
    ++gathers;
    EXPECT_EQ(total.bytes, kBatch * size() * static_cast<std::int64_t>(sizeof(float)))
        << "the step gathered more than the rows' maxima over " << total.group;
  }
  EXPECT_LE(gathers, 1);
  kd::set_distribution(nullptr);
  clear_session();
  set_random_seed(4);
  Sequential alone({layers::Dense(8, "relu", named("hidden")), layers::Dense(4, "", named("head"))}, "classifier");
  alone.compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true));
  EXPECT_NEAR(sharded_loss, alone.train_on_batch(x, y), 1e-6);
  // Labels out of range are the same error as the gathered loss's.
  kd::set_distribution(std::make_shared<kd::ModelParallel>(map));
  testing::expect_throw_with<ValueError>(
      [&] { model.train_on_batch(x, ops::scalar_like(y, 4) + y * 0); }, "label 4 is out of range for 4 classes");
  kd::set_distribution(nullptr);
}

}  // namespace
}  // namespace keras::model_parallel_table
