// Engine tests beyond the op table: tensors, the allocator and what serves gpu devices,
// autograd bookkeeping, the counter-based RNG's slice property, initializers, losses against
// hand-computed values, one optimizer step against Keras' formulas, and the errors bad inputs
// must give.
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>

#include "engine/backend.h"
#include "engine/cpu/kernels.h"
#include "engine/gpu_provider.h"
#include "engine/gpu_runtime.h"
#include "engine/op_dispatch.h"
#include "engine/unimplemented_backend.h"
#include "tests/test_helpers.h"

namespace keras {
namespace {

using testing::expect_close;
using testing::expect_throw_with;

TEST(Tensor, HandlesShareDataAndReshapeDoesNotCopy) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = a;
  Tensor c = ops::reshape(a, {3, 2});
  EXPECT_EQ(b.raw_data(), a.raw_data());
  EXPECT_EQ(c.raw_data(), a.raw_data());
  EXPECT_EQ(c.shape(), (Shape{3, 2}));
  EXPECT_EQ(a.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}));
}

// An annotation as the distribution module sets one: a block of a (4, 6) tensor.
struct BlockOfFourBySix : TensorAnnotation {
  Shape whole{4, 6};
  bool equals(const TensorAnnotation& other) const override { return dynamic_cast<const BlockOfFourBySix*>(&other); }
  std::string to_string() const override { return "a block of (4, 6)"; }
  const Shape& logical_shape() const override { return whole; }
};
struct NoRules : ShardedOpHandler {
  Tensor dispatch(const OpCall& call) const override { return call.compute(call.operands); }
};

// shape() reads the logical shape only while a handler is installed (inside a layer's call);
// local_shape() and local() are the stored block; detach() keeps the annotation (DTensor's).
TEST(Tensor, ShapeIsLogicalUnderAHandlerAndLocalIsTheBlock) {
  Tensor block = Tensor::ones({4, 3}).set_requires_grad(true);
  block.set_annotation(std::make_shared<BlockOfFourBySix>());
  EXPECT_EQ(block.shape(), (Shape{4, 3}));
  NoRules handler;
  {
    ShardedOpScope in_a_call(&handler);
    EXPECT_EQ(block.shape(), (Shape{4, 6}));
    EXPECT_EQ(block.size(), 24);
    EXPECT_EQ(block.local_shape(), (Shape{4, 3}));
    EXPECT_EQ(block.nbytes(), 12 * sizeof(float)) << "bytes are the stored block's";
    EXPECT_TRUE(block.detach().annotation()) << "detach() keeps the annotation";
    Tensor local = block.local();
    EXPECT_FALSE(local.annotation());
    EXPECT_EQ(local.shape(), (Shape{4, 3}));
    EXPECT_EQ(block.clone().local_shape(), (Shape{4, 3})) << "storage methods copy the block";
    Tensor unannotated = Tensor::ones({2, 2});
    EXPECT_EQ(unannotated.shape(), (Shape{2, 2}));
    ops::sum(local * 2.0).backward();
  }
  EXPECT_EQ(block.shape(), (Shape{4, 3}));
  EXPECT_EQ(block.grad().to_vector<float>(), std::vector<float>(12, 2.0f)) << "local()'s gradient reaches the block";
}

TEST(Tensor, RejectsWrongElementTypeAndBadShapes) {
  Tensor a = Tensor::zeros({2}, int64);
  expect_throw_with<DTypeError>([&] { a.data<float>(); }, "int64");
  expect_throw_with<ShapeError>([] { Tensor::from_vector<float>({1, 2, 3}, {2, 2}); }, "3 values");
  expect_throw_with<ValueError>([] { Tensor::zeros({2, -1}); }, "negative");
  expect_throw_with<ValueError>([] { Tensor().shape(); }, "undefined");
}

TEST(Tensor, GpuTensorsFailClearlyWithoutAGpu) {
  if (gpu::device_count() > 0) GTEST_SKIP() << "a GPU is present";
  // CPU-only build: "no GPU implementation"; CUDA build on a GPU-less machine: "does not exist".
  expect_throw_with<Error>([] { Tensor::zeros({2}, float32, Device::gpu(0)); }, "GPU");
}

// The backend without an implementation (a CPU-only build's GPU) is generated from
// engine/kernel_list.h: every kernel refuses by name, unary and binary ones by their op.
TEST(Backend, UnimplementedKernelsSayWhichAndWhy) {
  UnimplementedBackend backend("a test reason");
  Tensor x = Tensor::zeros({2}), out = Tensor::zeros({2});
  expect_throw_with<NotImplementedError>([&] { backend.fill(out, 1.0); },
                                         "fill has no GPU implementation: a test reason");
  expect_throw_with<NotImplementedError>([&] { backend.unary(UnaryOp::exp, x, out); },
                                         "exp has no GPU implementation");
  expect_throw_with<NotImplementedError>(
      [&] { backend.unary_gradient(UnaryOp::relu, x, x, out); }, "relu gradient has no GPU");
  expect_throw_with<NotImplementedError>([&] { backend.binary(BinaryOp::power, x, x, out); },
                                         "power has no GPU implementation");
  expect_throw_with<NotImplementedError>([&] { backend.matmul(x, x, false, true, out); },
                                         "matmul has no GPU implementation");
  expect_throw_with<NotImplementedError>(
      [&] { backend.adam_update({}, out, x, out, out); }, "adam_update has no GPU implementation");
}

TEST(Allocator, ReusesFreedBlocksInsteadOfAllocatingAgain) {
  { Tensor warm = Tensor::empty({1000, 1000}); }
  std::size_t before = allocator_stats(Device::cpu()).fresh_allocations;
  for (int i = 0; i < 10; ++i) Tensor again = Tensor::empty({1000, 1000});
  EXPECT_EQ(allocator_stats(Device::cpu()).fresh_allocations, before);
}

// One GPU in host memory that counts the blocks it hands out and gets back.
class CountingHostGpu final : public GpuProvider {
 public:
  int count() const override { return 1; }
  std::string description() const override { return "one GPU in host memory"; }
  Backend& backend() override { return cpu_backend(); }
  void* allocate(std::size_t bytes, int) override {
    ++allocated;
    return std::aligned_alloc(64, bytes);
  }
  void free(void* pointer, int) override {
    ++freed;
    std::free(pointer);
  }
  void copy_to_device(void* device_pointer, const void* host_pointer, std::size_t bytes,
                      int) override {
    std::memcpy(device_pointer, host_pointer, bytes);
  }
  void copy_to_host(void* host_pointer, const void* device_pointer, std::size_t bytes,
                    int) override {
    std::memcpy(host_pointer, device_pointer, bytes);
  }
  int allocated = 0;
  int freed = 0;
};

// While an override lives its provider serves the gpu devices (memory, copies, kernels, count);
// when it ends, the blocks the allocator cached for them go back to it, and the provider before
// serves again.
TEST(GpuProvider, AnOverrideServesTheGpusAndGetsItsCachedBlocksBack) {
  GpuProvider& before = gpu_provider();
  CountingHostGpu provider;
  {
    ScopedGpuProviderOverride serving(provider);
    EXPECT_EQ(&gpu_provider(), &provider);
    EXPECT_EQ(&backend_for(Device::gpu(0)), &cpu_backend());
    Tensor on_gpu = Tensor::from_vector<float>({1, 2, 3}, {3}).to(Device::gpu(0));
    EXPECT_EQ(on_gpu.to_vector<float>(), (std::vector<float>{1, 2, 3}));
    EXPECT_EQ(provider.allocated, 1);
    DefaultDeviceScope on(Device::gpu(0));  // gpu:0 exists: the provider counts one GPU
  }
  EXPECT_EQ(provider.freed, provider.allocated) << "the cached block went back to the provider";
  EXPECT_EQ(&gpu_provider(), &before);
}

TEST(ThreadPool, CoversTheRangeOnceAndPropagatesErrors) {
  std::vector<int> hits(100000, 0);
  parallel_for(100000, 10, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) hits[i] += 1;
  });
  for (int hit : hits) ASSERT_EQ(hit, 1);
  expect_throw_with<ValueError>(
      [] {
        parallel_for(100000, 10, [](std::int64_t begin, std::int64_t) {
          if (begin > 0) throw ValueError("from a worker");
        });
      },
      "from a worker");
}

// Workers started by set_num_threads wait for the next job: they used to take the last job
// before the resize as new, and ran its (finished, freed) body.
TEST(ThreadPool, ResizedPoolRunsOnlyNewJobs) {
  int threads = num_threads();
  parallel_for(1000, 1, [](std::int64_t, std::int64_t) {});
  for (int count : {3, 2, 4}) {
    set_num_threads(count);
    EXPECT_EQ(num_threads(), count);
    std::atomic<std::int64_t> total{0};
    parallel_for(1000, 1, [&](std::int64_t begin, std::int64_t end) { total += end - begin; });
    EXPECT_EQ(total.load(), 1000);
  }
  set_num_threads(threads);
}

TEST(Autograd, AccumulatesThroughSharedUsesAndIntoExistingGradients) {
  Tensor x = Tensor::from_vector<double>({1.0, 2.0, 3.0}, {3}).set_requires_grad(true);
  Tensor y = ops::sum(x * x + x * 3.0);  // dy/dx = 2x + 3
  y.backward();
  expect_close(x.grad().to_vector<double>(), {5, 7, 9}, 1e-12, "first backward");
  ops::sum(x).backward();  // gradients add up until cleared, as in PyTorch
  expect_close(x.grad().to_vector<double>(), {6, 8, 10}, 1e-12, "accumulated");
}

TEST(Autograd, NoGradGuardRecordsNothingAndBackwardNeedsAGraph) {
  Tensor x = Tensor::ones({2}).set_requires_grad(true);
  Tensor y;
  {
    NoGradGuard no_grad;
    y = ops::sum(x * 2.0);
  }
  EXPECT_FALSE(y.requires_grad());
  expect_throw_with<ValueError>([&] { y.backward(); }, "does not require gradients");
  expect_throw_with<ValueError>([&] { (x * 2.0).backward(); }, "scalar");
}

TEST(Autograd, LeafReadyHookFiresOncePerLeafInAFixedOrder) {
  Tensor a = Tensor::ones({2, 2}).set_requires_grad(true).set_name("a");
  Tensor b = Tensor::ones({2}).set_requires_grad(true).set_name("b");
  Tensor loss = ops::sum(ops::matmul(a, a) + b);
  auto run = [&] {
    std::vector<std::string> order;
    a.zero_grad();
    b.zero_grad();
    backward({loss}, {Tensor::ones({})}, [&](const Tensor& leaf) {
      EXPECT_TRUE(leaf.grad().defined()) << "the hook must see the final gradient";
      order.push_back(leaf.name());
    });
    return order;
  };
  std::vector<std::string> first = run();
  EXPECT_EQ(first.size(), 2u);
  EXPECT_EQ(std::set<std::string>(first.begin(), first.end()), (std::set<std::string>{"a", "b"}));
  for (int repeat = 0; repeat < 5; ++repeat) EXPECT_EQ(run(), first);  // same order every time
}

// The order must follow the graph's structure, never where tensors happen to sit in memory:
// data-parallel processes build their graphs with different allocation histories and must
// still see their leaves in one order (buckets are issued in it). Two graphs of 12 leaves,
// built with different allocations in between, give the same order, and it is the order the
// structure implies.
TEST(Autograd, LeafOrderDependsOnTheGraphNotOnAddresses) {
  auto leaf_order = [](int padding) {
    std::vector<Tensor> keep_alive;
    std::vector<Tensor> leaves;
    for (int i = 0; i < 12; ++i) {
      for (int p = 0; p < padding * (i % 3 + 1); ++p) keep_alive.push_back(Tensor::zeros({17 + p}));
      leaves.push_back(Tensor::ones({3}).set_requires_grad(true).set_name(str("w", i)));
    }
    // A chain with side branches: w0 feeds the end, w11 the start.
    Tensor h = leaves[11];
    for (int i = 10; i >= 0; --i) h = ops::tanh(h) * leaves[i] + (i % 2 == 0 ? leaves[i] : h);
    std::vector<std::string> order;
    backward({ops::sum(h)}, {Tensor::ones({})}, [&](const Tensor& leaf) { order.push_back(leaf.name()); });
    return order;
  };
  std::vector<std::string> first = leaf_order(0);
  EXPECT_EQ(leaf_order(5), first);
  EXPECT_EQ(leaf_order(13), first);
  // Each leaf is ready once all its uses are done: w0 is used last in forward, so first in
  // backward, and so on down the chain.
  std::vector<std::string> expected;
  for (int i = 0; i < 12; ++i) expected.push_back(str("w", i));
  EXPECT_EQ(first, expected);
}

// Every combination of transposition flags (the backward pass uses all of them), on batched,
// odd and wide shapes, against a float64 reference.
TEST(Matmul, TransposedProductsMatchAFloat64Reference) {
  struct Case { std::int64_t batch, m, n, k; };
  for (Case shape : {Case{1, 4, 256, 1024}, Case{2, 3, 64, 1030}, Case{1, 130, 256, 1024}, Case{1, 5, 7, 9}}) {
    for (int flags = 0; flags < 4; ++flags) {
      bool transpose_a = flags & 1, transpose_b = flags & 2;
      auto [batch, m, n, k] = shape;
      Shape a_shape = transpose_a ? Shape{batch, k, m} : Shape{batch, m, k};
      Shape b_shape = transpose_b ? Shape{batch, n, k} : Shape{batch, k, n};
      Tensor a = ops::random({RandomDistribution::uniform, -1, 1, 3}, a_shape);
      Tensor b = ops::random({RandomDistribution::uniform, -1, 1, 4}, b_shape);
      Tensor out = Tensor::empty({batch, m, n});
      cpu::matmul(a, b, transpose_a, transpose_b, out);
      std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>(), got = out.to_vector<float>();
      double worst = 0;
      for (std::int64_t p = 0; p < batch; ++p) {
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::int64_t j = 0; j < n; ++j) {
            double sum = 0;
            for (std::int64_t r = 0; r < k; ++r) {
              double x = av[static_cast<std::size_t>(p * m * k + (transpose_a ? r * m + i : i * k + r))];
              double y = bv[static_cast<std::size_t>(p * k * n + (transpose_b ? j * k + r : r * n + j))];
              sum += x * y;
            }
            worst = std::max(worst, std::abs(sum - got[static_cast<std::size_t>((p * m + i) * n + j)]));
          }
        }
      }
      EXPECT_LT(worst, 1e-3) << "batch " << batch << " m " << m << " n " << n << " k " << k
                             << " transpose_a " << transpose_a << " transpose_b " << transpose_b;
    }
  }
}

TEST(Ops, BadInputsGiveClearErrors) {
  Tensor a = Tensor::zeros({2, 3});
  Tensor b = Tensor::zeros({4, 5});
  expect_throw_with<ShapeError>([&] { ops::matmul(a, b); }, "(2, 3) and (4, 5)");
  expect_throw_with<ShapeError>([&] { ops::add(a, b); }, "cannot be broadcast");
  expect_throw_with<DTypeError>([&] { ops::add(a, Tensor::zeros({2, 3}, int64)); }, "float32 and int64");
  expect_throw_with<ValueError>([&] { ops::sum(a, {2}); }, "axis 2 is out of range");
  expect_throw_with<ValueError>([&] { ops::take(a, Tensor::from_vector<std::int64_t>({5}, {1}), 0); },
                                "index 5 is out of range");
  expect_throw_with<ValueError>([&] { ops::reshape(a, {-1, -1}); }, "more than one -1");
  expect_throw_with<ShapeError>([&] { ops::reshape(a, {4}); }, "cannot reshape");
  expect_throw_with<ValueError>([&] { ops::slice(a, {1, 0}, {2, 3}); }, "does not lie inside");
  expect_throw_with<DTypeError>([&] { ops::log(Tensor::zeros({2}, int32)); }, "expects a floating tensor");
}

TEST(Random, AnySliceEqualsTheSameSliceOfTheFullTensor) {
  for (auto distribution : {RandomDistribution::uniform, RandomDistribution::normal,
                            RandomDistribution::truncated_normal}) {
    RandomSpec spec{distribution, 0.0, 1.0, 1234};
    Tensor full = ops::random(spec, {6, 8, 5}, float64);
    Tensor expected = ops::slice(full, {2, 3, 1}, {3, 4, 2});
    Tensor block = ops::random_slice(spec, {6, 8, 5}, {2, 3, 1}, {3, 4, 2}, float64);
    EXPECT_EQ(block.to_vector<double>(), expected.to_vector<double>());
  }
}

TEST(Random, DistributionsHaveTheRightMomentsAndSeedsDiffer) {
  Tensor normal = ops::random({RandomDistribution::normal, 1.0, 2.0, 7}, {100000}, float64);
  EXPECT_NEAR(ops::mean(normal).item(), 1.0, 0.03);
  EXPECT_NEAR(std::sqrt(ops::var(normal).item()), 2.0, 0.03);
  Tensor truncated = ops::random({RandomDistribution::truncated_normal, 0.0, 1.0, 7}, {100000}, float64);
  EXPECT_LE(ops::max(ops::abs(truncated)).item(), 2.0);
  Tensor uniform = ops::random({RandomDistribution::uniform, -3.0, 5.0, 7}, {100000}, float64);
  EXPECT_GE(ops::min(uniform).item(), -3.0);
  EXPECT_LT(ops::max(uniform).item(), 5.0);
  EXPECT_NEAR(ops::mean(uniform).item(), 1.0, 0.05);
  Tensor other = ops::random({RandomDistribution::uniform, -3.0, 5.0, 8}, {100000}, float64);
  EXPECT_NE(other.to_vector<double>(), uniform.to_vector<double>());
}

TEST(Initializers, FollowKerasFormulasAndProduceBlocks) {
  auto glorot = initializers::glorot_uniform(3);
  Tensor kernel = (*glorot)({300, 200}, float64);
  double limit = std::sqrt(6.0 / 500.0);
  EXPECT_LE(ops::max(ops::abs(kernel)).item(), limit);
  EXPECT_NEAR(ops::var(kernel).item(), limit * limit / 3.0, 0.05 * limit * limit / 3.0);
  Tensor block = glorot->block({300, 200}, {100, 50}, {20, 30}, float64);
  EXPECT_EQ(block.to_vector<double>(), ops::slice(kernel, {100, 50}, {20, 30}).to_vector<double>());
  Tensor he = (*initializers::he_normal(4))({400, 300}, float64);
  EXPECT_NEAR(ops::var(he).item(), 2.0 / 400.0, 0.1 * 2.0 / 400.0);
  EXPECT_EQ(ops::sum((*initializers::ones())({3, 2})).item(), 6.0);
  expect_throw_with<ValueError>([] { initializers::get("glorot_magic"); }, "unknown initializer");
}

TEST(Losses, MatchHandComputedValues) {
  Tensor logits = Tensor::from_vector<double>({2.0, 1.0, 0.1, 0.5, 2.5, 0.3}, {2, 3});
  Tensor labels = Tensor::from_vector<std::int64_t>({0, 1}, {2});
  auto row_loss = [](double a, double b, double c, double pick) {
    return -(pick - std::log(std::exp(a) + std::exp(b) + std::exp(c)));
  };
  double expected = (row_loss(2.0, 1.0, 0.1, 2.0) + row_loss(0.5, 2.5, 0.3, 2.5)) / 2;
  EXPECT_NEAR(losses::SparseCategoricalCrossentropy(true)(labels, logits).item(), expected, 1e-12);
  Tensor one_hot = ops::one_hot(labels, 3, float64);
  EXPECT_NEAR(losses::CategoricalCrossentropy(true)(one_hot, logits).item(), expected, 1e-12);
  Tensor probabilities = ops::softmax(logits);
  EXPECT_NEAR(losses::get("sparse_categorical_crossentropy")->operator()(labels, probabilities).item(),
              expected, 1e-9);
  Tensor target = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_NEAR(losses::MeanSquaredError()(target, logits).item(),
              (1 + 1 + 8.41 + 12.25 + 6.25 + 32.49) / 6, 1e-12);
}

TEST(Losses, RejectWrongLabels) {
  Tensor logits = Tensor::zeros({2, 3});
  expect_throw_with<DTypeError>(
      [&] { losses::SparseCategoricalCrossentropy(true)(Tensor::zeros({2}), logits); },
      "labels must be integer class indices");
  expect_throw_with<ValueError>(
      [&] {
        losses::SparseCategoricalCrossentropy(true)(Tensor::from_vector<std::int64_t>({0, 3}, {2}), logits);
      },
      "label 3 is out of range");
  expect_throw_with<ShapeError>(
      [&] { losses::SparseCategoricalCrossentropy(true)(Tensor::zeros({3}, int64), logits); },
      "do not fit");
  expect_throw_with<ValueError>([] { losses::get("hinge_of_doom"); }, "unknown loss");
}

TEST(Optimizers, OneStepMatchesKerasFormulas) {
  auto run = [](optimizers::Optimizer& optimizer, int steps) {
    Tensor w = Tensor::from_vector<double>({1.0, -2.0}, {2}).set_requires_grad(true);
    for (int i = 0; i < steps; ++i) optimizer.apply({w}, {Tensor::from_vector<double>({0.5, -1.0}, {2})});
    return w.to_vector<double>();
  };
  optimizers::SGD sgd(0.1);
  expect_close(run(sgd, 1), {1.0 - 0.05, -2.0 + 0.1}, 1e-15, "SGD");
  // momentum 0.9, two steps: v1 = -lr g, w1 = w0 + v1; v2 = 0.9 v1 - lr g, w2 = w1 + v2.
  optimizers::SGD momentum(0.1, 0.9);
  expect_close(run(momentum, 2), {1.0 - 0.05 - 0.095, -2.0 + 0.1 + 0.19}, 1e-15, "momentum");
  // nesterov, one step: v = -lr g; w += 0.9 v - lr g.
  optimizers::SGD nesterov(0.1, 0.9, true);
  expect_close(run(nesterov, 1), {1.0 - 0.045 - 0.05, -2.0 + 0.09 + 0.1}, 1e-15, "nesterov");
  // Adam step 1: m = 0.1 g, v = 0.001 g², alpha = lr sqrt(0.001)/0.1 -> w -= lr * g/(|g| + eps').
  optimizers::Adam adam(0.01);
  double alpha = 0.01 * std::sqrt(1 - 0.999) / (1 - 0.9);
  auto adam_delta = [&](double g) { return alpha * 0.1 * g / (std::sqrt(0.001 * g * g) + 1e-7); };
  expect_close(run(adam, 1), {1.0 - adam_delta(0.5), -2.0 - adam_delta(-1.0)}, 1e-12, "Adam");
  optimizers::AdamW adamw(0.01, 0.1);
  expect_close(run(adamw, 1),
               {1.0 * (1 - 0.001) - adam_delta(0.5), -2.0 * (1 - 0.001) - adam_delta(-1.0)}, 1e-12,
               "AdamW");
  expect_throw_with<ValueError>([] { optimizers::SGD bad(-1.0); }, "learning_rate");
  expect_throw_with<ValueError>([] { optimizers::Adam bad(0.001, 1.5); }, "beta_1");
  expect_throw_with<ValueError>([] { optimizers::get("rmsprop_turbo"); }, "unknown optimizer");
}

}  // namespace
}  // namespace keras
