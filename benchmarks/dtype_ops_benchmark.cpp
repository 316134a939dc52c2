// The ops of a transformer step at examples/transformer_lm's shapes (batch 16, 128 bytes,
// width 128, 4 heads of 32; the feed-forward's 512), each timed in float32 and in bfloat16:
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

// Causal dot-product attention, forward and backward, as MultiHeadAttention runs it.
void BM_AttentionForwardBackward(benchmark::State& state) {
  const keras::DType dtype = dtype_of(state);
  Tensor query = random_tensor(kHeads, dtype, 15), key = random_tensor(kHeads, dtype, 16);
  Tensor value = random_tensor(kHeads, dtype, 17), seed = Tensor::ones(kHeads, dtype);
  time_op(state, [&] {
    Tensor q = query, k = key, v = value;
    q.set_requires_grad(true);
    k.set_requires_grad(true);
    v.set_requires_grad(true);
    Tensor attended = keras::layers::dot_product_attention(q, k, v, Tensor(), std::nullopt, /*is_causal=*/true,
                                                           nullptr, /*training=*/false);
    attended.backward(seed);
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
KERAS_DTYPE_BENCHMARK(BM_AttentionForwardBackward);

}  // namespace
