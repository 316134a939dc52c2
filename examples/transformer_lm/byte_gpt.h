// The byte-level GPT of examples/transformer_lm, shared with benchmarks/transformer_step: a
// subclassed model of pre-norm decoder blocks (causal MultiHeadAttention, a GELU feed-forward),
// token and position embeddings and a 256-way head, named as keras-hub names Gemma's weights so
// that its layout map applies as written.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "keras.h"

namespace byte_gpt {

namespace kd = keras::distribution;
namespace kl = keras::layers;
using keras::Tensor;

struct Config {
  std::int64_t blocks = 4, width = 128, heads = 4, context = 128;
};

inline kl::DenseOptions named(const std::string& name) {
  kl::DenseOptions options;
  options.name = name;
  return options;
}

// Pre-norm decoder block: x + attention(norm(x)), then x + feed_forward(norm(x)).
class DecoderBlock : public keras::Layer {
 public:
  DecoderBlock(std::int64_t width, std::int64_t heads, const std::string& name) : Layer("decoder_block", name) {
    attention_norm_ = add_layer(kl::LayerNormalization(1e-5, true, true, "pre_attention_norm"));
    kl::MultiHeadAttentionOptions attention;
    attention.name = "attention";
    attention_ = add_layer(kl::MultiHeadAttention(heads, width / heads, attention));
    feed_forward_norm_ = add_layer(kl::LayerNormalization(1e-5, true, true, "pre_ffw_norm"));
    gating_ = add_layer(kl::Dense(4 * width, "gelu", named("ffw_gating")));
    linear_ = add_layer(kl::Dense(width, "", named("ffw_linear")));
  }
  Tensor call(const Tensor& x, bool training) override {
    Tensor normed = (*attention_norm_)(x, training);
    Tensor attended = (*attention_)(normed, normed, Tensor(), Tensor(), /*use_causal_mask=*/true, training);
    Tensor residual = x + attended;
    return residual + (*linear_)((*gating_)((*feed_forward_norm_)(residual, training), training), training);
  }

 private:
  std::shared_ptr<kl::LayerNormalization> attention_norm_, feed_forward_norm_;
  std::shared_ptr<kl::MultiHeadAttention> attention_;
  std::shared_ptr<kl::Dense> gating_, linear_;
};

class BytePredictor : public keras::Model {
 public:
  explicit BytePredictor(const Config& flags) : Model("byte_gpt") {
    token_embedding_ = add_layer(kl::Embedding(256, flags.width, nullptr, "token_embedding"));
    position_embedding_ = add_layer(kl::PositionEmbedding(flags.context, nullptr, "position_embedding"));
    for (std::int64_t b = 0; b < flags.blocks; ++b) {
      blocks_.push_back(add_layer(DecoderBlock(flags.width, flags.heads, "decoder_block_" + std::to_string(b))));
    }
    final_norm_ = add_layer(kl::LayerNormalization(1e-5, true, true, "final_norm"));
    head_ = add_layer(kl::Dense(256, "", named("lm_head")));
  }
  Tensor call(const Tensor& tokens, bool training) override {
    Tensor x = (*token_embedding_)(tokens, training);
    x = x + (*position_embedding_)(x, training);
    for (const auto& block : blocks_) x = (*block)(x, training);
    return (*head_)((*final_norm_)(x, training), training);
  }

 private:
  std::shared_ptr<kl::Embedding> token_embedding_;
  std::shared_ptr<kl::PositionEmbedding> position_embedding_;
  std::vector<std::shared_ptr<DecoderBlock>> blocks_;
  std::shared_ptr<kl::LayerNormalization> final_norm_;
  std::shared_ptr<kl::Dense> head_;
};

// keras-hub's Gemma layout map (GemmaBackbone.get_layout_map), on this model's names.
inline std::shared_ptr<kd::LayoutMap> gemma_layout_map(const std::shared_ptr<kd::DeviceMesh>& mesh) {
  auto map = std::make_shared<kd::LayoutMap>(mesh);
  (*map)["token_embedding/embeddings"] = {"model", "batch"};
  (*map)[".*attention.*(query|key|value).kernel"] = {"model", "batch", std::nullopt};
  (*map)[".*attention_output.kernel"] = {"model", std::nullopt, "batch"};
  (*map)[".*ffw_gating.*kernel"] = {"batch", "model"};
  (*map)[".*ffw_linear.kernel"] = {"model", "batch"};
  return map;
}


// Matmul FLOPs of one training step (forward, and backward at twice the forward) for `batch`
// sequences of `length` bytes: the projections and feed-forward products (12 width^2 per block
// and token), the head's, and attention's two batched products (4 length width per block and
// token). Embedding lookups and element-wise work are not counted, as in MFU.
inline double training_step_flops(const Config& config, std::int64_t batch, std::int64_t length) {
  const double tokens = static_cast<double>(batch * length);
  const double w = static_cast<double>(config.width);
  const double per_token_forward = 2.0 * (static_cast<double>(config.blocks) * 12.0 * w * w + 256.0 * w) +
                                   static_cast<double>(config.blocks) * 4.0 * static_cast<double>(length) * w;
  return 3.0 * tokens * per_token_forward;
}

}  // namespace byte_gpt
