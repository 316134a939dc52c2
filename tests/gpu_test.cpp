// The GPU backend beyond the op table (ops_test.cpp runs every op on every backend).
// GpuKernelsOnHost: engine/cuda/'s kernel bodies run on host memory (tests/gpu_emulation/), so
// their paths the op table's small shapes miss (chunked reductions), their data errors, their
// random numbers and a whole training run are checked on every machine.
// The trainer on an (emulated) GPU device: every tensor placed there.
// Gpu: the same on a real GPU, plus what only a GPU has (cuBLAS, copies, devices, memory);
// skipped, saying why, where there is none.
#include <cstring>

#include "engine/gpu_runtime.h"
#include "tests/gpu_emulation/gpu_emulation.h"
#include "tests/test_helpers.h"

namespace keras {
namespace {

using testing::expect_close;
using testing::expect_throw_with;

// Runs fn once on the CPU backend and once with the GPU kernels on host memory.
template <typename Fn>
auto on_cpu_and_emulated(Fn&& fn) {
  auto on_cpu = fn();
  ScopedCpuBackendOverride emulate(testing::emulated_gpu_backend());
  auto emulated = fn();
  return std::make_pair(on_cpu, emulated);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor x = a.to(Device::cpu()), y = b.to(Device::cpu());
  return x.dtype() == y.dtype() && x.shape() == y.shape() &&
         std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

TEST(GpuKernelsOnHost, LongReductionsFoldTheirChunksInOrder) {
  // 5000 > 1024: the reduction runs as chunks and then a pass over the chunks.
  Tensor x = testing::random_tensor({3, 5000}, 4, float64, -1.0, 1.0);
  Tensor integers = ops::cast(x * 1000.0, int64);
  auto [cpu, emulated] = on_cpu_and_emulated([&] {
    return std::vector<Tensor>{ops::sum(x, {1}), ops::max(x, {1}), ops::min(x, {0}),
                               ops::sum(x), ops::sum(integers, {1}), ops::max(integers)};
  });
  expect_close(emulated[0].to_vector<double>(), cpu[0].to_vector<double>(), 1e-12, "sum");
  EXPECT_TRUE(same_bits(emulated[1], cpu[1])) << "max";
  EXPECT_TRUE(same_bits(emulated[2], cpu[2])) << "min";
  expect_close(emulated[3].to_vector<double>(), cpu[3].to_vector<double>(), 1e-12, "sum of all");
  EXPECT_TRUE(same_bits(emulated[4], cpu[4])) << "integer sum";
  EXPECT_TRUE(same_bits(emulated[5], cpu[5])) << "integer max";
}

TEST(GpuKernelsOnHost, IntegerDivisionByZeroIsTheCpuError) {
  ScopedCpuBackendOverride emulate(testing::emulated_gpu_backend());
  Tensor a = Tensor::from_vector<std::int64_t>({7, 8}, {2});
  Tensor b = Tensor::from_vector<std::int64_t>({1, 0}, {2});
  expect_throw_with<ValueError>([&] { ops::divide(a, b); }, "integer division by zero (8 / 0)");
  Tensor negative = Tensor::from_vector<std::int64_t>({2, -3}, {2});
  expect_throw_with<ValueError>([&] { ops::power(a, negative); }, "(got 8 ** -3)");
  // The report was taken: the next division works.
  EXPECT_EQ(ops::divide(a, a).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 1}));
}

TEST(GpuKernelsOnHost, RandomFillsDrawTheCpuBits) {
  for (auto distribution : {RandomDistribution::uniform, RandomDistribution::normal,
                            RandomDistribution::truncated_normal}) {
    for (DType dtype : {float32, float64}) {
      RandomSpec spec{distribution, 0.5, 2.0, 1234};
      auto [cpu, emulated] = on_cpu_and_emulated([&] {
        return std::vector<Tensor>{ops::random(spec, {37, 11}, dtype),
                                   ops::random_slice(spec, {37, 11}, {5, 3}, {9, 4}, dtype)};
      });
      EXPECT_TRUE(same_bits(emulated[0], cpu[0])) << dtype_name(dtype);
      EXPECT_TRUE(same_bits(emulated[1], cpu[1])) << dtype_name(dtype) << " slice";
    }
  }
}

// The same formulas (engine/optimizer_rules.h); not the same bits, as compilers contract a*b+c
// into one FMA in some loops and not others (GCC's vectorised CPU loop against this scalar one,
// and nvcc on the GPU).
TEST(GpuKernelsOnHost, OptimizerUpdatesFollowTheCpuFormulas) {
  auto run = [](auto&& update) {
    Tensor w = testing::random_tensor({1000}, 1, float32), g = testing::random_tensor({1000}, 2, float32);
    Tensor m = Tensor::zeros({1000}), v = Tensor::zeros({1000});
    for (int step = 1; step <= 3; ++step) update(step, w, g, m, v);
    return std::vector<Tensor>{w, m, v};
  };
  auto adam = [](int step, Tensor& w, Tensor& g, Tensor& m, Tensor& v) {
    backend_for(w.device()).adam_update({0.01, 0.9, 0.999, 1e-7, 0.004, step}, w, g, m, v);
  };
  auto nesterov = [](int, Tensor& w, Tensor& g, Tensor& m, Tensor&) {
    backend_for(w.device()).sgd_update({0.1, 0.9, true, 0.01}, w, g, m);
  };
  // RMSprop's slots: velocity in v, and momentum (or, centered, the average gradient) in m.
  auto rmsprop_momentum = [](int, Tensor& w, Tensor& g, Tensor& m, Tensor& v) {
    Tensor none;
    backend_for(w.device()).rmsprop_update({0.01, 0.9, 0.5, 1e-7, false, 0.01}, w, g, v, m, none);
  };
  auto rmsprop_centered = [](int, Tensor& w, Tensor& g, Tensor& m, Tensor& v) {
    Tensor none;
    backend_for(w.device()).rmsprop_update({0.01, 0.9, 0.0, 1e-7, true, 0.0}, w, g, v, none, m);
  };
  auto adagrad = [](int, Tensor& w, Tensor& g, Tensor& m, Tensor&) {
    backend_for(w.device()).adagrad_update({0.1, 1e-7, 0.01}, w, g, m);
  };
  for (auto [cpu, emulated] : {on_cpu_and_emulated([&] { return run(adam); }),
                               on_cpu_and_emulated([&] { return run(nesterov); }),
                               on_cpu_and_emulated([&] { return run(rmsprop_momentum); }),
                               on_cpu_and_emulated([&] { return run(rmsprop_centered); }),
                               on_cpu_and_emulated([&] { return run(adagrad); })}) {
    for (int k = 0; k < 3; ++k) {
      expect_close(emulated[k].to_vector<double>(), cpu[k].to_vector<double>(), 1e-6,
                   "slot " + std::to_string(k));
    }
  }
}

// Trains a small classifier with every tensor on `device` (the default device), and returns
// the weights. Dense-relu-Dense, Adam, sparse cross-entropy and accuracy: every kernel a
// training step calls (matmul, bias, relu, softmax cross-entropy, reductions, Adam).
std::vector<double> train_on(Device device) {
  DefaultDeviceScope on(device);
  clear_session();
  set_random_seed(3);
  testing::Blobs data = testing::make_blobs(96, 5);
  Sequential model({layers::Dense(8, "relu"), layers::Dense(3)});
  model.compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true), {"accuracy"});
  History history = model.fit(data.x, data.y, {.batch_size = 32, .epochs = 2, .verbose = 0});
  EXPECT_EQ(model.predict(data.x).device(), Device::cpu()) << "predict returns host tensors";
  std::vector<double> weights;
  for (const Tensor& w : model.weights()) {
    EXPECT_EQ(w.device(), device) << w.name();
    for (double value : w.to_vector<double>()) weights.push_back(value);
  }
  weights.push_back(history.history["accuracy"].back());
  return weights;
}

// The trainer on an emulated gpu:0 (host memory, the CUDA kernel bodies): every variable, batch
// and temporary must be on it, or an op refuses the mix of devices; the weights equal the CPU's.
TEST(GpuKernelsOnHost, TrainingOnTheGpuGivesTheCpuWeights) {
  if (gpu::device_count() > 0) GTEST_SKIP() << "a real GPU is here: Gpu.TrainingGivesTheCpuWeights runs";
  std::vector<double> on_cpu = train_on(Device::cpu());
  testing::ScopedGpuEmulation emulation;
  expect_close(train_on(Device::gpu(0)), on_cpu, 1e-5, "weights after two epochs");
}

// Indices out of range on a GPU: the op does not wait to find out; the next read from the
// device throws the CPU's message, the slot is then clear, and the bad rows were left as zeros
// (nothing was read outside the table).
void check_index_errors_wait_for_the_next_read(Device gpu) {
  Tensor table = Tensor::ones({4, 2}, float32, gpu);
  Tensor looked_up = ops::take(table, Tensor::from_vector<std::int64_t>({1, 9}, {2}).to(gpu), 0);
  expect_throw_with<ValueError>(
      [&] { looked_up.to(Device::cpu()); },
      "take: index 9 is out of range; expected values in [-4, 4) (found by a check on the GPU, "
      "reported at the next read from it)");
  EXPECT_EQ(looked_up.to_vector<float>(), (std::vector<float>{1, 1, 0, 0}));

  Tensor logits = Tensor::zeros({2, 3}, float32, gpu);
  Tensor loss = losses::SparseCategoricalCrossentropy(true)(
      Tensor::from_vector<std::int32_t>({0, 5}, {2}).to(gpu), logits);
  expect_throw_with<ValueError>([&] { loss.item(); },
                                "sparse_categorical_crossentropy: label 5 is out of range for 3 "
                                "classes; expected labels in [0, 3)");

  DefaultDeviceScope on(gpu);
  layers::Embedding embedding(4, 2, initializers::get("uniform"), "words");
  Tensor vectors = embedding(Tensor::from_vector<std::int64_t>({3, -1}, {2}).to(gpu));
  expect_throw_with<ValueError>([&] { vectors.to_vector<float>(); },
                                "Embedding 'words': index -1 is out of range; expected indices "
                                "in [0, 4)");
}

TEST(GpuKernelsOnHost, IndexErrorsWaitForTheNextRead) {
  if (gpu::device_count() > 0) GTEST_SKIP() << "a real GPU is here: Gpu.IndexErrorsWaitForTheNextRead runs";
  testing::ScopedGpuEmulation emulation;
  check_index_errors_wait_for_the_next_read(Device::gpu(0));
}

// fit() on a GPU reads from it only for the logs: after each epoch (one copy for the loss, one
// per metric), whatever the number of batches, unless a callback asks for every batch's.
TEST(GpuKernelsOnHost, TrainingReadsFromTheGpuOnlyForTheLogs) {
  if (gpu::device_count() > 0) GTEST_SKIP() << "counts reads of the emulated GPU";
  testing::ScopedGpuEmulation emulation;
  auto reads_to_train = [](std::int64_t samples, std::vector<CallbackPtr> callbacks) {
    DefaultDeviceScope on(Device::gpu(0));
    clear_session();
    set_random_seed(3);
    testing::Blobs data = testing::make_blobs(samples, 5);
    Sequential model({layers::Dense(8, "relu"), layers::Dense(3)});
    model.compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(), {"accuracy"});
    model.build({samples, 2});
    std::int64_t before = testing::emulated_gpu_reads();
    model.fit(data.x, data.y, {.batch_size = 8, .epochs = 2, .callbacks = callbacks, .verbose = 0});
    return testing::emulated_gpu_reads() - before;
  };
  EXPECT_EQ(reads_to_train(16, {}), 2 * 2) << "2 batches an epoch";
  EXPECT_EQ(reads_to_train(128, {}), 2 * 2) << "16 batches an epoch";
  // TerminateOnNaN reads every batch's loss, as in Keras.
  EXPECT_EQ(reads_to_train(128, {std::make_shared<TerminateOnNaN>()}), 2 * 16 * 2);
}

TEST(DefaultDevice, AGpuThatDoesNotExistIsRefused) {
  if (gpu::device_count() > 0) GTEST_SKIP() << "a GPU is here";
  expect_throw_with<ValueError>([] { set_default_device(Device::gpu(0)); },
                                "set_default_device(gpu:0): that GPU does not exist");
  EXPECT_EQ(default_device(), Device::cpu());
}

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU here (" << gpu::description() << ")";
  }
};

TEST_F(Gpu, CopiesRoundTripAndMatmulMatchesTheCpu) {
  Tensor a = testing::random_tensor({300, 200}, 1, float32), b = testing::random_tensor({200, 150}, 2, float32);
  EXPECT_TRUE(same_bits(a.to(Device::gpu(0)).to(Device::cpu()), a));
  for (bool transpose_a : {false, true}) {
    for (bool transpose_b : {false, true}) {
      Tensor left = transpose_a ? ops::transpose(a) : a;
      Tensor right = transpose_b ? ops::transpose(b) : b;
      Tensor expected = ops::matmul(a, b);
      Tensor out = Tensor::empty({300, 150}, float32, Device::gpu(0));
      gpu_backend().matmul(left.to(Device::gpu(0)), right.to(Device::gpu(0)), transpose_a,
                           transpose_b, out);
      expect_close(out.to_vector<double>(), expected.to_vector<double>(), 1e-4,
                   "matmul transpose_a=" + std::to_string(transpose_a) +
                       " transpose_b=" + std::to_string(transpose_b));
    }
  }
}

TEST_F(Gpu, RandomFillsDrawTheCpuValues) {
  RandomSpec uniform{RandomDistribution::uniform, -1.0, 1.0, 99};
  EXPECT_TRUE(same_bits(ops::random(uniform, {1000, 100}, float32, Device::gpu(0)),
                        ops::random(uniform, {1000, 100}, float32)));
  RandomSpec normal{RandomDistribution::normal, 0.0, 1.0, 99};
  expect_close(ops::random(normal, {1000, 100}, float64, Device::gpu(0)).to_vector<double>(),
               ops::random(normal, {1000, 100}, float64).to_vector<double>(), 1e-14, "normal");
}

TEST_F(Gpu, IntegerDivisionByZeroIsTheCpuError) {
  Tensor a = Tensor::from_vector<std::int32_t>({7, 8}, {2}).to(Device::gpu(0));
  Tensor b = Tensor::from_vector<std::int32_t>({1, 0}, {2}).to(Device::gpu(0));
  expect_throw_with<ValueError>([&] { ops::divide(a, b); }, "integer division by zero (8 / 0)");
  EXPECT_EQ(ops::divide(a, a).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 1}));
}

TEST_F(Gpu, TensorsOnAnotherDeviceAreRefused) {
  Tensor on_gpu = Tensor::ones({3}, float32, Device::gpu(0));
  expect_throw_with<ValueError>([&] { ops::add(on_gpu, Tensor::ones({3})); },
                                "inputs are on different devices (gpu:0 and cpu:0)");
}

TEST_F(Gpu, AMissingGpuIsNamed) {
  int count = gpu::device_count();
  expect_throw_with<ValueError>([&] { Tensor::zeros({2}, float32, Device::gpu(count)); },
                                "gpu:" + std::to_string(count) + " does not exist");
}

TEST_F(Gpu, IndexErrorsWaitForTheNextRead) {
  check_index_errors_wait_for_the_next_read(Device::gpu(0));
}

TEST_F(Gpu, TrainingGivesTheCpuWeights) {
  expect_close(train_on(Device::gpu(0)), train_on(Device::cpu()), 1e-5, "weights after two epochs");
}

TEST_F(Gpu, OutOfMemoryIsAClearError) {
  // 2^44 floats = 64 TiB, more than any GPU has.
  expect_throw_with<OutOfMemoryError>(
      [] { Tensor::empty({std::int64_t{1} << 44}, float32, Device::gpu(0)); },
      "out of memory on gpu:0");
  // The device is still usable afterwards.
  EXPECT_EQ(Tensor::ones({2}, float32, Device::gpu(0)).to_vector<float>(),
            (std::vector<float>{1, 1}));
}

}  // namespace
}  // namespace keras
