// The transformer layers on one process: EinsumDense's shapes and maths, MultiHeadAttention
// against attention written out in loops (float64) from the layer's own weights, its masks,
// its gradient against finite differences, Softmax's mask, RMSNormalization, Add, and bad
// input answered with errors that say what was expected.
#include <cmath>

#include "tests/test_helpers.h"

namespace keras {
namespace {

using testing::expect_close;
using testing::expect_throw_with;

class AttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clear_session();
    set_random_seed(3);
  }
};

TEST_F(AttentionTest, EinsumDenseBuildsKerasShapesAndComputesTheEinsum) {
  layers::EinsumDenseOptions options;
  options.bias_axes = "de";
  options.bias_initializer = initializers::get("glorot_uniform");
  layers::EinsumDense projection("abc,cde->abde", {-1, 2, 3}, options);
  Tensor x = testing::random_tensor({2, 4, 5}, 1, float32);
  Tensor y = projection(x);
  EXPECT_EQ(y.shape(), (Shape{2, 4, 2, 3}));
  EXPECT_EQ(projection.kernel().shape(), (Shape{5, 2, 3}));
  EXPECT_EQ(projection.bias().shape(), (Shape{2, 3}));
  EXPECT_EQ(projection.variables()[0]->path(), "einsum_dense/kernel");
  Tensor expected = ops::reshape(ops::matmul(ops::reshape(x, {8, 5}), ops::reshape(projection.kernel(), {5, 6})),
                                 {2, 4, 2, 3}) + projection.bias();
  expect_close(y.to_vector<double>(), expected.to_vector<double>(), 1e-6, "einsum_dense");

  // "..." over the leading dimensions, and a bias over one trailing axis.
  layers::EinsumDenseOptions trailing;
  trailing.bias_axes = "c";
  layers::EinsumDense dense_like("...b,bc->...c", {7}, trailing);
  EXPECT_EQ(dense_like(Tensor::zeros({2, 3, 5})).shape(), (Shape{2, 3, 7}));
  EXPECT_EQ(dense_like.bias().shape(), (Shape{7}));
  EXPECT_EQ(dense_like.class_name(), "EinsumDense");
}

TEST_F(AttentionTest, EinsumDenseRefusesEquationsThatDoNotParseOrFit) {
  expect_throw_with<ValueError>([] { layers::EinsumDense("abc->abd", {4}); }, "invalid einsum equation");
  expect_throw_with<ValueError>([] { layers::EinsumDense("ab,bc", {4}); }, "invalid einsum equation");
  expect_throw_with<ValueError>([] { layers::EinsumDense("a1,bc->ac", {4}); }, "'1' is not a dimension letter");
  expect_throw_with<ValueError>([] { layers::EinsumDense("ab,bc->aq", {4}); }, "in neither the input nor the kernel");
  expect_throw_with<ValueError>([] { layers::EinsumDense("...b,bc->ac", {4}); }, "'...' must lead both");
  expect_throw_with<ValueError>([] { layers::EinsumDense("ab,bc->ac", {4, 5}); },
                                "has 2 dimensions, but 'ab,bc->ac' names 1");
  layers::EinsumDenseOptions bias;
  bias.bias_axes = "z";
  expect_throw_with<ValueError>([&] { layers::EinsumDense("ab,bc->ac", {4}, bias); },
                                "bias dimension 'z' was requested, but is not part of the output spec");
  // The input does not match the equation, or the output_shape contradicts it.
  layers::EinsumDense dense("abc,cd->abd", {3, 4});
  expect_throw_with<ShapeError>([&] { dense(Tensor::zeros({2, 5})); }, "expects inputs of rank 3, got rank 2");
  expect_throw_with<ValueError>([&] { dense(Tensor::zeros({2, 2, 5})); },
                                "do not match at shared dimension 'b'. Input shape is 2, and output shape is 3");
  layers::EinsumDense built("ab,bc->ac", {4});
  built(Tensor::zeros({2, 5}));
  expect_throw_with<ShapeError>([&] { built(Tensor::zeros({2, 6})); }, "does not fit inputs of shape (2, 6)");
  expect_throw_with<ValueError>([] {
    layers::EinsumDense heads("ab,bcd->acd", {-1, 3});
    heads(Tensor::zeros({2, 5}));
  }, "'c' is not in the input, so output_shape must give its size");
}

// Attention written out with loops in float64 from the layer's weights: what the layer must
// compute (Keras' equations: scores (B, N, T, S) from q·k / sqrt(key_dim), masked softmax over
// S, the weighted values, then the output projection).
std::vector<double> attention_by_loops(layers::MultiHeadAttention& layer, const Tensor& query_in,
                                       const Tensor& value_in, const std::vector<int>& mask /* B*T*S, or empty */) {
  auto values = [](const Tensor& t) { return t.to_vector<double>(); };
  const std::vector<double> query = values(query_in), value = values(value_in);
  const std::int64_t B = query_in.dim(0), T = query_in.dim(1), S = value_in.dim(1), D = query_in.dim(2);
  const std::int64_t N = layer.num_heads(), H = layer.key_dim(), E = layer.output_dense().kernel().dim(2);
  const auto wq = values(layer.query_dense().kernel()), bq = values(layer.query_dense().bias());
  const auto wk = values(layer.key_dense().kernel()), bk = values(layer.key_dense().bias());
  const auto wv = values(layer.value_dense().kernel()), bv = values(layer.value_dense().bias());
  const auto wo = values(layer.output_dense().kernel()), bo = values(layer.output_dense().bias());
  auto project = [&](const std::vector<double>& x, std::int64_t length, const std::vector<double>& w,
                     const std::vector<double>& b) {
    std::vector<double> out(static_cast<std::size_t>(B * length * N * H));
    for (std::int64_t i = 0; i < B * length; ++i)
      for (std::int64_t n = 0; n < N * H; ++n) {
        double total = b[static_cast<std::size_t>(n)];
        for (std::int64_t d = 0; d < D; ++d) total += x[static_cast<std::size_t>(i * D + d)] * w[static_cast<std::size_t>(d * N * H + n)];
        out[static_cast<std::size_t>(i * N * H + n)] = total;
      }
    return out;
  };
  const auto q = project(query, T, wq, bq), k = project(value, S, wk, bk), v = project(value, S, wv, bv);
  std::vector<double> attended(static_cast<std::size_t>(B * T * N * H), 0.0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t t = 0; t < T; ++t) {
        std::vector<double> scores(static_cast<std::size_t>(S));
        double largest = -1e300;
        for (std::int64_t s = 0; s < S; ++s) {
          double dot = 0;
          for (std::int64_t h = 0; h < H; ++h) {
            dot += q[static_cast<std::size_t>(((b * T + t) * N + n) * H + h)] * k[static_cast<std::size_t>(((b * S + s) * N + n) * H + h)];
          }
          bool kept = mask.empty() || mask[static_cast<std::size_t>((b * T + t) * S + s)];
          scores[static_cast<std::size_t>(s)] = kept ? dot / std::sqrt(double(H)) : -1e9;
          largest = std::max(largest, scores[static_cast<std::size_t>(s)]);
        }
        double total = 0;
        for (double& score : scores) total += (score = std::exp(score - largest));
        for (std::int64_t s = 0; s < S; ++s) {
          bool kept = mask.empty() || mask[static_cast<std::size_t>((b * T + t) * S + s)];
          double p = kept ? scores[static_cast<std::size_t>(s)] / total : 0.0;
          for (std::int64_t h = 0; h < H; ++h) {
            attended[static_cast<std::size_t>(((b * T + t) * N + n) * H + h)] += p * v[static_cast<std::size_t>(((b * S + s) * N + n) * H + h)];
          }
        }
      }
  std::vector<double> out(static_cast<std::size_t>(B * T * E));
  for (std::int64_t i = 0; i < B * T; ++i)
    for (std::int64_t e = 0; e < E; ++e) {
      double total = bo[static_cast<std::size_t>(e)];
      for (std::int64_t nh = 0; nh < N * H; ++nh) total += attended[static_cast<std::size_t>(i * N * H + nh)] * wo[static_cast<std::size_t>(nh * E + e)];
      out[static_cast<std::size_t>(i * E + e)] = total;
    }
  return out;
}

TEST_F(AttentionTest, MultiHeadAttentionHasKerasWeightsAndComputesAttention) {
  layers::MultiHeadAttentionOptions options;
  options.bias_initializer = initializers::get("glorot_uniform");  // non-zero biases, so they are checked
  layers::MultiHeadAttention attention(2, 3, options);
  Tensor query = testing::random_tensor({2, 4, 6}, 11, float32);
  Tensor value = testing::random_tensor({2, 5, 6}, 12, float32);
  Tensor out = attention(query, value);
  EXPECT_EQ(out.shape(), (Shape{2, 4, 6}));
  std::vector<std::string> paths;
  std::vector<Shape> shapes;
  for (Variable* variable : attention.variables()) {
    paths.push_back(variable->path());
    shapes.push_back(variable->value.shape());
  }
  EXPECT_EQ(paths, (std::vector<std::string>{
                       "multi_head_attention/query/kernel", "multi_head_attention/query/bias",
                       "multi_head_attention/key/kernel", "multi_head_attention/key/bias",
                       "multi_head_attention/value/kernel", "multi_head_attention/value/bias",
                       "multi_head_attention/attention_output/kernel", "multi_head_attention/attention_output/bias"}));
  EXPECT_EQ(shapes, (std::vector<Shape>{{6, 2, 3}, {2, 3}, {6, 2, 3}, {2, 3}, {6, 2, 3}, {2, 3}, {2, 3, 6}, {6}}));
  expect_close(out.to_vector<double>(), attention_by_loops(attention, query, value, {}), 2e-5, "attention");
  EXPECT_EQ(attention.class_name(), "MultiHeadAttention");
  EXPECT_EQ(attention.output_shape(), (Shape{-1, 4, 6}));
}

TEST_F(AttentionTest, MasksHideKeysAndTheCausalMaskHidesTheFuture) {
  layers::MultiHeadAttention attention(2, 4);
  Tensor x = testing::random_tensor({2, 5, 8}, 21, float32);
  // Causal: position t sees only positions <= t, so changing the last position changes no
  // earlier output.
  Tensor causal = attention(x, x, Tensor(), Tensor(), /*use_causal_mask=*/true);
  std::vector<int> lower(2 * 5 * 5);
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 5; ++t)
      for (int s = 0; s < 5; ++s) lower[static_cast<std::size_t>((b * 5 + t) * 5 + s)] = s <= t;
  expect_close(causal.to_vector<double>(), attention_by_loops(attention, x, x, lower), 2e-5, "causal");
  Tensor changed = ops::concatenate({ops::slice(x, {0, 0, 0}, {2, 4, 8}), testing::random_tensor({2, 1, 8}, 22, float32)}, 1);
  Tensor causal_changed = attention(changed, changed, Tensor(), Tensor(), true);
  expect_close(ops::slice(causal_changed, {0, 0, 0}, {2, 4, 8}).to_vector<double>(),
               ops::slice(causal, {0, 0, 0}, {2, 4, 8}).to_vector<double>(), 1e-6, "the future stays hidden");
  // Padding: the last two keys of the second sequence are masked, with the causal mask too.
  std::vector<int> padding(2 * 5 * 5);
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 5; ++t)
      for (int s = 0; s < 5; ++s) padding[static_cast<std::size_t>((b * 5 + t) * 5 + s)] = (b == 0 || s < 3);
  std::vector<float> padding_values(padding.begin(), padding.end());
  Tensor padding_mask = Tensor::from_vector<float>(padding_values, {2, 5, 5});
  std::vector<int> both(padding.size());
  for (std::size_t i = 0; i < both.size(); ++i) both[i] = padding[i] && lower[i];
  expect_close(attention(x, x, Tensor(), padding_mask, true).to_vector<double>(),
               attention_by_loops(attention, x, x, both), 2e-5, "padding and causal");
  // A (T, S) mask broadcasts over the batch.
  Tensor two_d = ops::slice(padding_mask, {1, 0, 0}, {1, 5, 5});
  EXPECT_EQ(attention(x, x, Tensor(), ops::reshape(two_d, {5, 5})).shape(), (Shape{2, 5, 8}));
}

TEST_F(AttentionTest, MultiHeadAttentionGradientMatchesFiniteDifferences) {
  layers::MultiHeadAttention attention(2, 2);
  Tensor x = testing::random_tensor({1, 3, 4}, 31, float32);
  Tensor weights = testing::random_tensor({1, 3, 4}, 32, float32);
  auto loss_of = [&](const Tensor& input) {
    return ops::sum(attention(input, input, Tensor(), Tensor(), true) * weights);
  };
  Tensor input = x.clone();
  input.set_requires_grad(true);
  Tensor loss = loss_of(input);
  loss.backward();
  std::vector<double> gradient = input.grad().to_vector<double>();
  std::vector<double> base = x.to_vector<double>();
  const double step = 1e-2;
  for (std::size_t i = 0; i < base.size(); ++i) {
    std::vector<float> up(base.begin(), base.end()), down(base.begin(), base.end());
    up[i] += static_cast<float>(step);
    down[i] -= static_cast<float>(step);
    NoGradGuard no_grad;
    double plus = loss_of(Tensor::from_vector<float>(up, x.shape())).item();
    double minus = loss_of(Tensor::from_vector<float>(down, x.shape())).item();
    EXPECT_NEAR(gradient[i], (plus - minus) / (2 * step), 2e-3) << "element " << i;
  }
}

TEST_F(AttentionTest, BadAttentionInputsAreClearErrors) {
  expect_throw_with<ValueError>([] { layers::MultiHeadAttention(2, 0); }, "key_dim must be positive, got 0");
  expect_throw_with<ValueError>([] { layers::MultiHeadAttention(0, 4); }, "num_heads must be positive");
  layers::MultiHeadAttentionOptions dropout;
  dropout.dropout = 1.0;
  expect_throw_with<ValueError>([&] { layers::MultiHeadAttention(2, 4, dropout); }, "dropout must be in [0, 1)");
  layers::MultiHeadAttention attention(2, 4);
  Tensor x = Tensor::zeros({2, 5, 8});
  expect_throw_with<ShapeError>([&] { attention(x, x, Tensor(), Tensor::ones({2, 5, 4})); },
                                "attention_mask has shape (2, 5, 4); expected (batch, T, S) = (2, 5, 5)");
  expect_throw_with<ShapeError>([&] { attention(x, x, Tensor(), Tensor::ones({5})); }, "attention_mask has shape (5,)");
  expect_throw_with<ValueError>([&] { attention(x, x, Tensor::zeros({2, 4, 8})); },
                                "all dimensions of `value` and `key`, except the last one, must be equal");
  expect_throw_with<NotImplementedError>([&] { attention(Tensor::zeros({2, 5})); }, "only (batch, sequence, features)");
}

TEST_F(AttentionTest, SoftmaxAddAndRMSNormalization) {
  Tensor scores = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor mask = Tensor::from_vector<float>({1, 1, 0, 0, 0, 0}, {2, 3});
  std::vector<double> masked = layers::Softmax()(scores, mask).to_vector<double>();
  double e = std::exp(1.0);
  expect_close(masked, {1 / (1 + e), e / (1 + e), 0, 0, 0, 0}, 1e-6, "masked softmax (a fully masked row is 0)");
  expect_throw_with<ShapeError>([&] { layers::Softmax()(scores, Tensor::ones({3, 3})); },
                                "the mask must be broadcastable to the inputs");

  layers::Add add;
  Tensor sum = add({scores, scores, scores});
  expect_close(sum.to_vector<double>(), {3, 6, 9, 12, 15, 18}, 0, "add");
  expect_throw_with<ShapeError>([&] { add({scores, Tensor::zeros({3, 2})}); }, "input 1 has shape (3, 2)");
  expect_throw_with<ValueError>([&] { add(std::vector<Tensor>{scores}); }, "at least 2 inputs, got 1");
  expect_throw_with<ValueError>([&] { add(scores); }, "call it with a list");

  layers::RMSNormalization norm;
  Tensor x = Tensor::from_vector<float>({3, 4, 0, 0}, {2, 2});
  std::vector<double> y = norm(x).to_vector<double>();
  double rms = std::sqrt(12.5 + 1e-6);
  expect_close(y, {3 / rms, 4 / rms, 0, 0}, 1e-6, "rms_normalization");
  EXPECT_EQ(norm.variables()[0]->path(), "rms_normalization/scale");
  EXPECT_EQ(norm.class_name(), "RMSNormalization");
  expect_throw_with<ValueError>([] { layers::RMSNormalization(0.0); }, "epsilon must be > 0");
}

}  // namespace
}  // namespace keras
