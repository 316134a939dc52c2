// The ops of a transformer step at examples/transformer_lm's shapes (batch 16, 128 bytes,
// width 128, 4 heads of 32; the feed-forward's 512) and the convolutions of the guide's convnet
// (examples/fashion_mnist/guide_convnet.h, batch 128), each timed in float32 and in bfloat16:
// where a `mixed_bfloat16` step spends more than a float32 one, op by op. Each benchmark takes
// the dtype as its argument (0 float32, 1 bfloat16), so the two sit side by side in the output;
// run with --benchmark_repetitions and read the medians, this VM's timings drift between minutes.
//   KERAS_NUM_THREADS=1 taskset -c 0 dtype_ops_benchmark [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdint>
#include <optional>
#include <string>

#include "engine/ops/op_helpers.h"
#include "keras.h"
#include "layers/multi_head_attention.h"

namespace {

using keras::Tensor;

keras::DType dtype_of(const benchmark::State& state) { return state.range(0) == 0 ? keras::float32 : keras::bfloat16; }

Tensor random_tensor(const keras::Shape& shape, keras::DType dtype, std::uint64_t seed) {
  keras::RandomSpec spec{.distribution = keras::RandomDistribution::uniform, .a = -1.0, .b = 1.0, .seed = seed};
  return keras::ops::cast(keras::ops::random(spec, shape), dtype);
}

// Times `op` (after one call that pays for set-up) and labels the row with its dtype.
template <typename Op>
void time_op(benchmark::State& state, Op&& op) {
  op();
  for (auto _ : state) op();
  state.SetLabel(std::string(keras::dtype_name(dtype_of(state))) + " threads=" + std::to_string(keras::num_threads()));
}

// Attention's shapes: (batch, sequence, heads, head size) and the scores (batch, heads, T, S).
const keras::Shape kHeads{16, 128, 4, 32};
const keras::Shape kScores{16, 4, 128, 128};

void BM_ScoresEinsum(benchmark::State& state) {
  Tensor query = random_tensor(kHeads, dtype_of(state), 1), key = random_tensor(kHeads, dtype_of(state), 2);
  time_op(state, [&] { benchmark::DoNotOptimize(keras::ops::einsum("aecd,abcd->acbe", key, query)); });
}

void BM_ValuesEinsum(benchmark::State& state) {
  Tensor probabilities = random_tensor(kScores, dtype_of(state), 3), value = random_tensor(kHeads, dtype_of(state), 4);
  time_op(state, [&] { benchmark::DoNotOptimize(keras::ops::einsum("acbe,aecd->abcd", probabilities, value)); });
}

void BM_MaskBiasAdd(benchmark::State& state) {
  Tensor scores = random_tensor(kScores, dtype_of(state), 5), bias = random_tensor({128, 128}, dtype_of(state), 6);
  time_op(state, [&] { benchmark::DoNotOptimize(keras::ops::add(scores, bias)); });
}

void BM_Softmax(benchmark::State& state) {
  Tensor scores = random_tensor(kScores, dtype_of(state), 7);
  time_op(state, [&] { benchmark::DoNotOptimize(keras::ops::softmax(scores, -1)); });
}

void BM_TransposeLastTwoAxes(benchmark::State& state) {
  Tensor scores = random_tensor(kScores, dtype_of(state), 8);
  time_op(state, [&] { benchmark::DoNotOptimize(keras::ops::transpose(scores, {0, 1, 3, 2})); });
}

// The feed-forward's first product and its two gradient products: x (2048, 128) @ w (128, 512).
void BM_DenseForward(benchmark::State& state) {
  Tensor x = random_tensor({2048, 128}, dtype_of(state), 9), w = random_tensor({128, 512}, dtype_of(state), 10);
  time_op(state, [&] { benchmark::DoNotOptimize(keras::ops::matmul(x, w)); });
}

void BM_DenseInputGradient(benchmark::State& state) {
  Tensor dy = random_tensor({2048, 512}, dtype_of(state), 11), w = random_tensor({128, 512}, dtype_of(state), 12);
  time_op(state, [&] { benchmark::DoNotOptimize(keras::ops::detail::matmul_transposed(dy, w, false, true)); });
}

void BM_DenseKernelGradient(benchmark::State& state) {
  Tensor x = random_tensor({2048, 128}, dtype_of(state), 13), dy = random_tensor({2048, 512}, dtype_of(state), 14);
  time_op(state, [&] { benchmark::DoNotOptimize(keras::ops::detail::matmul_transposed(x, dy, true, false)); });
}

// The feed-forward's bias gradient: the output gradient (16, 128, 512) summed over batch and
// sequence, a column sum.
void BM_BiasGradient(benchmark::State& state) {
  Tensor dy = random_tensor({16, 128, 512}, dtype_of(state), 22);
  time_op(state, [&] { benchmark::DoNotOptimize(keras::ops::sum(dy, {0, 1})); });
}

// Causal dot-product attention, forward and backward, as MultiHeadAttention runs it.
void BM_AttentionForwardBackward(benchmark::State& state) {
  const keras::DType dtype = dtype_of(state);
  Tensor query = random_tensor(kHeads, dtype, 15), key = random_tensor(kHeads, dtype, 16);
  Tensor value = random_tensor(kHeads, dtype, 17), seed = Tensor::ones(kHeads, dtype);
  time_op(state, [&] {
    // Fresh leaves each time: a leaf kept between calls would add each call's gradient into the last.
    Tensor q = query.detach(), k = key.detach(), v = value.detach();
    q.set_requires_grad(true);
    k.set_requires_grad(true);
    v.set_requires_grad(true);
    Tensor attended = keras::layers::dot_product_attention(q, k, v, Tensor(), std::nullopt, /*is_causal=*/true,
                                                           nullptr, /*training=*/false);
    attended.backward(seed);
  });
}

// The guide convnet's three convolutions at batch 128, forward and both gradients:
// (input shape, kernel shape, stride, padding) by the benchmark's second argument.
struct ConvolutionLayer {
  keras::Shape input, kernel;
  std::int64_t stride;
  const char* padding;
};
const ConvolutionLayer kConvolutions[] = {{{128, 28, 28, 1}, {3, 3, 1, 12}, 1, "same"},
                                          {{128, 28, 28, 12}, {6, 6, 12, 24}, 2, "valid"},
                                          {{128, 12, 12, 24}, {6, 6, 24, 32}, 2, "same"}};

void BM_ConvolutionForwardBackward(benchmark::State& state) {
  const keras::DType dtype = dtype_of(state);
  const ConvolutionLayer& layer = kConvolutions[state.range(1)];
  Tensor input = random_tensor(layer.input, dtype, 18), kernel = random_tensor(layer.kernel, dtype, 19);
  const std::vector<std::int64_t> strides{layer.stride, layer.stride};
  Tensor seed = Tensor::ones(keras::ops::conv(input, kernel, strides, layer.padding).shape(), dtype);
  time_op(state, [&] {
    Tensor x = input.detach(), k = kernel.detach();
    x.set_requires_grad(state.range(1) > 0);  // the first layer's input (the images) needs none
    k.set_requires_grad(true);
    keras::ops::conv(x, k, strides, layer.padding).backward(seed);
  });
}

// What follows each convolution: BatchNormalization (no scale, a float32 offset) and ReLU,
// forward and backward, on the convolution's output by the second argument.
void BM_BatchNormalizationReluForwardBackward(benchmark::State& state) {
  const keras::DType dtype = dtype_of(state);
  const ConvolutionLayer& layer = kConvolutions[state.range(1)];
  const keras::Shape shape = keras::ops::conv(Tensor::zeros(layer.input), Tensor::zeros(layer.kernel),
                                              {layer.stride, layer.stride}, layer.padding).shape();
  Tensor input = random_tensor(shape, dtype, 20), offset = random_tensor({shape.back()}, keras::float32, 21);
  Tensor seed = Tensor::ones(shape, dtype);
  time_op(state, [&] {
    Tensor x = input.detach(), beta = offset.detach();
    x.set_requires_grad(true);
    beta.set_requires_grad(true);
    keras::ops::relu(keras::ops::fused_batch_normalization(x, Tensor(), beta, 3, 1e-3)).backward(seed);
  });
}

#define KERAS_DTYPE_BENCHMARK(name) \
  BENCHMARK(name)->ArgName("bfloat16")->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond)
KERAS_DTYPE_BENCHMARK(BM_ScoresEinsum);
KERAS_DTYPE_BENCHMARK(BM_ValuesEinsum);
KERAS_DTYPE_BENCHMARK(BM_MaskBiasAdd);
KERAS_DTYPE_BENCHMARK(BM_Softmax);
KERAS_DTYPE_BENCHMARK(BM_TransposeLastTwoAxes);
KERAS_DTYPE_BENCHMARK(BM_DenseForward);
KERAS_DTYPE_BENCHMARK(BM_DenseInputGradient);
KERAS_DTYPE_BENCHMARK(BM_DenseKernelGradient);
KERAS_DTYPE_BENCHMARK(BM_BiasGradient);
KERAS_DTYPE_BENCHMARK(BM_AttentionForwardBackward);
#define KERAS_CONVNET_BENCHMARK(name)                                                                       \
  BENCHMARK(name)->ArgNames({"bfloat16", "layer"})->ArgsProduct({{0, 1}, {0, 1, 2}})->UseRealTime()->Unit( \
      benchmark::kMicrosecond)
KERAS_CONVNET_BENCHMARK(BM_ConvolutionForwardBackward);
KERAS_CONVNET_BENCHMARK(BM_BatchNormalizationReluForwardBackward);

}  // namespace
