// Multi-process tests, run by CTest under `mpirun -np 2` and `-np 4`: collectives against
// closed-form results, sub-groups, errors instead of hangs (mismatched collectives, a rank that
// never joins), and the data-parallel invariant — training on P processes gives the weights of
// training on one process with the same global batch and seed.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "distribution/runtime/gradient_reducer.h"
#include "distribution/runtime/local_gpu.h"
#include "distribution/transports/mpi/mpi_communicator.h"
#include "engine/gpu_runtime.h"
#include "keras.h"
#include "tests/gpu_emulation/emulated_gpu_group.h"
#include "tests/test_helpers.h"

namespace keras {
namespace {

namespace kd = keras::distribution;
using keras::testing::expect_throw_with;

int size() { return kd::num_processes(); }
int rank() { return kd::process_id(); }

TEST(MpiRuntime, DevicesAndProcesses) {
  ASSERT_GT(size(), 1) << "run this binary under mpirun -np N with N > 1";
  std::vector<std::string> devices = kd::list_devices("cpu");
  ASSERT_EQ(static_cast<int>(devices.size()), size());
  EXPECT_EQ(devices.back(), "cpu:" + std::to_string(size() - 1));
  expect_throw_with<ValueError>([] { kd::initialize(); }, "already called");
}

// A peer that vanishes mid-write must not end this process silently by SIGPIPE (Gloo writes
// with writev): a job ignores it, so the collective fails and names the peer.
TEST(MpiRuntime, ABrokenPipeDoesNotEndTheProcess) {
  ASSERT_GT(size(), 1);
  struct sigaction current {};
  ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &current), 0);
  EXPECT_EQ(current.sa_handler, SIG_IGN);
}

// Both processes run on this machine: local ranks 0 and 1 of 2, so they would take gpu:0 and
// gpu:1, and a host with one GPU refuses the job on both processes.
TEST(MpiRuntime, ProcessesOfOneHostTakeOneGpuEach) {
  auto& world = kd::world();
  kd::HostPlace place = kd::place_on_host(world);
  EXPECT_EQ(place.local_rank, world.rank());
  EXPECT_EQ(place.local_size, world.size());
  EXPECT_EQ(kd::choose_local_gpu(place, world.size()), world.rank());
  expect_throw_with<ValueError>(
      [&] { kd::choose_local_gpu(place, world.size() - 1); },
      "runs " + std::to_string(world.size()) + " processes but has " +
          std::to_string(world.size() - 1) + " GPU(s)");
  // Asking for the GPU where there is none says why; the job itself still runs on CPUs.
  if (!kd::local_gpu()) expect_throw_with<ValueError>([] { kd::require_local_gpu(); }, "no GPU to use");
}

TEST(MpiCollectives, ClosedFormResults) {
  kd::Communicator& world = kd::world();
  double n = size();
  Tensor values = Tensor::full({5}, rank() + 1.0);
  world.all_reduce(values, kd::ReduceOperation::sum);
  for (double v : values.to_vector<double>()) EXPECT_EQ(v, n * (n + 1) / 2);
  Tensor mean = Tensor::full({3}, rank() + 1.0, float64);
  world.all_reduce(mean, kd::ReduceOperation::mean);
  for (double v : mean.to_vector<double>()) EXPECT_DOUBLE_EQ(v, (n + 1) / 2);
  Tensor extreme = Tensor::full({2}, rank(), int64);
  world.all_reduce(extreme, kd::ReduceOperation::max);
  EXPECT_EQ(extreme.to_vector<std::int64_t>()[0], size() - 1);
  Tensor low = Tensor::full({2}, rank() + 7, int32);
  world.all_reduce(low, kd::ReduceOperation::min);
  EXPECT_EQ(low.to_vector<std::int32_t>()[1], 7);

  Tensor gathered = world.all_gather(Tensor::full({2}, rank(), int64));
  ASSERT_EQ(gathered.shape(), (Shape{size(), 2}));
  for (int r = 0; r < size(); ++r) EXPECT_EQ(gathered.to_vector<std::int64_t>()[2 * r], r);

  // reduce_scatter is the first half of all_reduce: block r of the sum lands on rank r.
  Tensor contribution = ops::random({RandomDistribution::normal, 0, 1, 100u + unsigned(rank())},
                                    {size() * 3, 2}, float64);
  Tensor full_sum = contribution.clone();
  world.all_reduce(full_sum);
  Tensor block = world.reduce_scatter(contribution);
  Tensor expected = ops::slice(full_sum, {rank() * 3, 0}, {3, 2});
  keras::testing::expect_close(block.to_vector<double>(), expected.to_vector<double>(), 1e-12,
                               "reduce_scatter");

  Tensor broadcasted = Tensor::full({4}, rank() == size() - 1 ? 42.0 : -1.0);
  world.broadcast(broadcasted, size() - 1);
  for (double v : broadcasted.to_vector<double>()) EXPECT_EQ(v, 42.0);
  world.barrier();
}

// bfloat16 and float16 travel as 16-bit words and reduce in float32 per pair (our own MPI
// operations: distribution/runtime/half_precision_reduction.h): small integers are exact in
// both, so the sums are closed-form; 40,000 elements take the ring paths too.
TEST(MpiCollectives, HalfPrecisionCollectives) {
  kd::Communicator& world = kd::world();
  const double n = size();
  for (DType dtype : {bfloat16, float16}) {
    SCOPED_TRACE(dtype_name(dtype));
    for (std::int64_t count : {std::int64_t{5}, std::int64_t{40000}}) {
      Tensor values = Tensor::full({count}, rank() + 1.0, dtype);
      world.all_reduce(values, kd::ReduceOperation::sum);
      EXPECT_EQ(values.dtype(), dtype);
      for (double v : values.to_vector<double>()) ASSERT_EQ(v, n * (n + 1) / 2);
    }
    Tensor mean = Tensor::full({3}, 2.0 * rank(), dtype);
    world.all_reduce(mean, kd::ReduceOperation::mean);
    for (double v : mean.to_vector<double>()) EXPECT_EQ(v, n - 1);
    Tensor extreme = Tensor::full({2}, rank(), dtype);
    world.all_reduce(extreme, kd::ReduceOperation::max);
    EXPECT_EQ(extreme.to_vector<double>()[1], n - 1);
    Tensor gathered = world.all_gather(Tensor::full({2}, rank() + 0.5, dtype));
    for (int r = 0; r < size(); ++r) EXPECT_EQ(gathered.to_vector<double>()[2 * r], r + 0.5);
    Tensor contribution = Tensor::full({size() * 20000}, 1.0, dtype);
    Tensor block = world.reduce_scatter(contribution);
    for (double v : block.to_vector<double>()) ASSERT_EQ(v, n);
    Tensor broadcasted = Tensor::full({4}, rank() == 0 ? 3.25 : -1.0, dtype);
    world.broadcast(broadcasted, 0);
    for (double v : broadcasted.to_vector<double>()) EXPECT_EQ(v, 3.25);
  }
}

// From 64 KiB in all, reduce_scatter and all_gather go round a ring of sends (see
// mpi_communicator.h): the same results as MPI's own algorithms below that size, for every
// operation, in place and not.
TEST(MpiCollectives, RingReduceScatterAndAllGatherMatchAllReduce) {
  auto& world = kd::world();
  const std::int64_t block_elements = 20000;  // 80 KB a block in float32: the ring at any size
  for (DType dtype : {float32, float64, int64}) {
    for (kd::ReduceOperation operation : {kd::ReduceOperation::sum, kd::ReduceOperation::mean,
                                          kd::ReduceOperation::max, kd::ReduceOperation::min}) {
      if (dtype == int64 && operation == kd::ReduceOperation::mean) continue;
      Tensor contribution = ops::cast(
          ops::random({RandomDistribution::uniform, -50, 50, 300u + unsigned(rank())},
                      {size() * block_elements}, float64),
          dtype);
      Tensor full = contribution.clone();
      world.all_reduce(full, operation);
      Tensor block = world.reduce_scatter(contribution, operation);
      Tensor expected = ops::slice(full, {rank() * block_elements}, {block_elements});
      keras::testing::expect_close(ops::cast(block, float64).to_vector<double>(),
                                   ops::cast(expected, float64).to_vector<double>(),
                                   // Over 3 or more ranks the ring adds in another order (terms up to 50).
                                   dtype == float32 ? 2e-5 : 1e-12,
                                   str("ring reduce_scatter ", dtype_name(dtype), " op ",
                                       static_cast<int>(operation)));
    }
  }
  // all_gather out of place, then in place (this rank's block already in the output).
  Tensor mine = Tensor::full({block_elements}, 1.5 * rank() + 1.0, float32);
  Tensor gathered = world.all_gather(mine);
  std::vector<float> in_place(static_cast<std::size_t>(size() * block_elements), -7.0f);
  std::copy_n(mine.to_vector<float>().begin(), block_elements,
              in_place.begin() + rank() * block_elements);
  world.all_gather(in_place.data() + rank() * block_elements, in_place.data(), block_elements,
                   float32);
  std::vector<float> out_of_place = gathered.to_vector<float>();
  for (int r = 0; r < size(); ++r) {
    EXPECT_EQ(out_of_place[static_cast<std::size_t>(r * block_elements + 5)], 1.5f * static_cast<float>(r) + 1.0f);
  }
  EXPECT_EQ(in_place, out_of_place);
  // A group of one process: the block is the whole contribution (the ring has no step).
  auto alone = world.split(rank(), 0, "one process");
  Tensor own = ops::random({RandomDistribution::normal, 0, 1, 9}, {block_elements}, float32);
  EXPECT_EQ(alone->reduce_scatter(own).to_vector<float>(), own.to_vector<float>());
}

TEST(MpiCollectives, SubGroupsFromSplit) {
  auto group = kd::world().split(rank() % 2, rank(), "parity group");
  int expected_size = size() / 2 + (rank() % 2 == 0 ? size() % 2 : 0);
  EXPECT_EQ(group->size(), expected_size);
  EXPECT_EQ(group->rank(), rank() / 2);
  Tensor values = Tensor::full({1}, 1.0);
  group->all_reduce(values);
  EXPECT_EQ(values.item(), expected_size);
  EXPECT_EQ(group->name(), "parity group");
}

TEST(MpiCollectives, OneGroupPerMeshAxis) {
  if (size() != 4) GTEST_SKIP() << "needs 4 processes for a (2, 2) mesh";
  kd::DeviceMesh mesh({2, 2}, {"batch", "model"});
  auto model_group = kd::mesh_axis_group(mesh, "model");  // {0, 1} and {2, 3}
  auto batch_group = kd::mesh_axis_group(mesh, "batch");  // {0, 2} and {1, 3}
  Tensor in_model = Tensor::full({1}, rank());
  model_group->all_reduce(in_model);
  EXPECT_EQ(in_model.item(), rank() < 2 ? 1.0 : 5.0);
  Tensor in_batch = Tensor::full({1}, rank());
  batch_group->all_reduce(in_batch);
  EXPECT_EQ(in_batch.item(), rank() % 2 == 0 ? 2.0 : 4.0);
  EXPECT_EQ(model_group->rank(), rank() % 2);
  EXPECT_EQ(batch_group->rank(), rank() / 2);
  expect_throw_with<ValueError>([] { kd::mesh_axis_group(kd::DeviceMesh({4}, {"batch"}), "model"); },
                                "'model' is not an axis");
  // A permuted device list: a process's coordinate is where its device sits in the mesh.
  kd::DeviceMesh permuted({2, 2}, {"batch", "model"},
                          std::vector<std::string>{"cpu:3", "cpu:1", "cpu:2", "cpu:0"});
  const std::int64_t position[4] = {3, 1, 2, 0};  // of cpu:0 … cpu:3
  EXPECT_EQ(kd::process_device_index(permuted), position[rank()]);
  auto permuted_model = kd::mesh_axis_group(permuted, "model");  // {cpu:3, cpu:1}, {cpu:2, cpu:0}
  Tensor pair_sum = Tensor::full({1}, rank());
  permuted_model->all_reduce(pair_sum);
  EXPECT_EQ(pair_sum.item(), rank() % 2 == 1 ? 4.0 : 2.0);
  EXPECT_EQ(permuted_model->rank(), position[rank()] % 2);
}

TEST(MpiDistributions, ReplicaCountsAndShardsAcrossProcesses) {
  auto devices = [](int count) {
    std::vector<std::string> names;
    for (int i = 0; i < count; ++i) names.push_back("cpu:" + std::to_string(i));
    return names;
  };
  kd::DataParallel data_parallel;
  EXPECT_EQ(data_parallel.num_processes(), size());
  EXPECT_TRUE(data_parallel.is_multi_process());
  EXPECT_EQ(data_parallel.num_model_replicas(), size());
  EXPECT_EQ(data_parallel.data_shard_id(), rank());
  if (size() == 4) {
    auto uneven = std::make_shared<kd::LayoutMap>(std::make_shared<kd::DeviceMesh>(
        std::vector<std::int64_t>{3, 2}, std::vector<std::string>{"batch", "model"}, devices(6)));
    expect_throw_with<ValueError>([&] { kd::ModelParallel parallel(uneven); },
                                  "num_processes=4, num_model_replicas=3");
    auto pairs = std::make_shared<kd::LayoutMap>(std::make_shared<kd::DeviceMesh>(
        std::vector<std::int64_t>{2, 2}, std::vector<std::string>{"batch", "model"}, devices(4)));
    kd::ModelParallel parallel(pairs);
    EXPECT_EQ(parallel.num_model_replicas(), 2);
    EXPECT_EQ(parallel.num_data_shards(), 2);
    EXPECT_EQ(parallel.data_shard_id(), rank() / 2);  // contiguous replica groups
  }
}

TEST(MpiDistributions, DistributeTensorGivesEachProcessItsShard) {
  auto mesh = std::make_shared<kd::DeviceMesh>(std::vector<std::int64_t>{size()},
                                               std::vector<std::string>{"batch"});
  Tensor full = Tensor::arange(size() * 3, float32);
  auto rows = std::make_shared<kd::TensorLayout>(std::vector<kd::TensorLayout::Axis>{"batch"}, mesh);
  Tensor mine = kd::distribute_tensor(full, rows);
  EXPECT_EQ(mine.to_vector<float>(),
            ops::slice(full, {rank() * 3}, {3}).to_vector<float>());
  auto replicated = std::make_shared<kd::TensorLayout>(std::vector<kd::TensorLayout::Axis>{std::nullopt}, mesh);
  EXPECT_TRUE(kd::distribute_tensor(full, replicated).same_as(full));
  // Gathering the shards gives the full tensor back (saved weights are full tensors).
  Tensor gathered = kd::world().all_gather(mine);
  EXPECT_EQ(ops::reshape(gathered, {-1}).to_vector<float>(), full.to_vector<float>());
  expect_throw_with<ValueError>([&] { kd::distribute_tensor(Tensor::arange(size() * 3 + 1, float32), rows); },
                                "cannot be split evenly");
}

// Mismatched collectives, a rank that never joins, a killed rank and early returns poison the
// communicator and end the job, so they are tested one process pair each by
// tests/faults/check_fault_exit.py, not here.

TEST(MpiErrors, TimeoutsOutsideTheirRangeAreRefused) {
  expect_throw_with<ValueError>([] { kd::world().set_timeout(std::chrono::milliseconds(0)); },
                                "expected 1 ms to");
  expect_throw_with<ValueError>(
      [] { kd::world().set_timeout(std::chrono::hours(24 * 365)); }, "expected 1 ms to");
}

struct Dataset {
  Tensor x, y;
};
Dataset make_dataset(std::int64_t count) {
  Tensor labels = ops::cast(ops::random({RandomDistribution::uniform, 0, 3, 5}, {count}, float64), int64);
  Tensor centers = Tensor::from_vector<float>({1, 0, 0, 1, -1, -1}, {3, 2});
  Tensor noise = ops::random({RandomDistribution::normal, 0, 0.7, 6}, {count, 2}, float32);
  Tensor x = ops::concatenate({ops::take(centers, labels, 0) + noise, noise * noise}, 1);
  return {x, labels};
}

std::vector<std::vector<double>> train(bool data_parallel, const std::string& optimizer,
                                       std::map<std::string, double>* evaluation,
                                       std::int64_t samples = 202, bool dropout = false) {
  clear_session();
  kd::set_distribution(data_parallel ? std::make_shared<kd::DataParallel>() : nullptr);
  set_random_seed(2024);
  // 202 = 6 batches of 32 + 10: a partial last batch, split unevenly over 4 processes.
  Dataset data = make_dataset(samples);
  std::vector<AnyLayer> stack = {layers::Dense(16, "relu"), layers::Dense(8, "tanh"), layers::Dense(3)};
  if (dropout) stack.insert(stack.begin() + 1, layers::Dropout(0.3));
  Sequential model(stack);
  if (optimizer == "adam") {
    model.compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true), {"accuracy"});
  } else {
    model.compile(optimizers::SGD(0.1, 0.9, true), losses::SparseCategoricalCrossentropy(true),
                  {"accuracy"});
  }
  model.fit(data.x, data.y, {.batch_size = 32, .epochs = 3, .verbose = 0});
  *evaluation = model.evaluate(data.x, data.y, {.batch_size = 50, .verbose = 0});
  std::vector<std::vector<double>> weights;
  for (const Tensor& weight : model.weights()) weights.push_back(weight.to_vector<double>());
  kd::set_distribution(nullptr);
  return weights;
}

void expect_same_training(const std::string& optimizer, std::int64_t samples = 202,
                          bool dropout = false) {
  std::map<std::string, double> single_evaluation, parallel_evaluation;
  auto single = train(false, optimizer, &single_evaluation, samples, dropout);
  auto parallel = train(true, optimizer, &parallel_evaluation, samples, dropout);
  ASSERT_EQ(single.size(), parallel.size());
  for (std::size_t w = 0; w < single.size(); ++w) {
    keras::testing::expect_close(parallel[w], single[w], 1e-5,
                                 optimizer + " weight " + std::to_string(w));
  }
  EXPECT_NEAR(parallel_evaluation["loss"], single_evaluation["loss"], 1e-5);
  EXPECT_NEAR(parallel_evaluation["accuracy"], single_evaluation["accuracy"], 1e-9);
  // Every process holds the same replica.
  Tensor first = Tensor::from_vector(parallel[0], {std::int64_t(parallel[0].size())});
  Tensor low = first.clone(), high = first.clone();
  kd::world().all_reduce(low, kd::ReduceOperation::min);
  kd::world().all_reduce(high, kd::ReduceOperation::max);
  EXPECT_EQ(low.to_vector<double>(), high.to_vector<double>());
}

TEST(DataParallelTraining, MatchesOneProcessWithSgdNesterov) { expect_same_training("sgd"); }
TEST(DataParallelTraining, MatchesOneProcessWithAdam) { expect_same_training("adam"); }
// 66 samples: the last batch has 2 rows, so with 4 processes two of them get none.
TEST(DataParallelTraining, MatchesOneProcessWithDropoutAndEmptyShares) {
  expect_same_training("adam", 66, /*dropout=*/true);
}

// On every process's (emulated) GPU: the gradient buckets live on gpu:0 and are reduced by the
// world's GPU twin (gpu_world(): NCCL on real GPUs, a host group on the emulated one's memory
// here), and the weights are still one CPU process's.
TEST(DataParallelTraining, OnTheGpusMatchesOneProcess) {
  if (gpu::device_count() > 0) GTEST_SKIP() << "GPUs are here: tests/nccl/ trains on them";
  std::map<std::string, double> single_evaluation, parallel_evaluation;
  auto single = train(false, "adam", &single_evaluation);
  keras::testing::ScopedGpuEmulation emulation;
  kd::ScopedGpuWorldOverride gpus(std::make_shared<keras::testing::EmulatedGpuGroup>(kd::world_pointer()));
  const std::int64_t served_before = keras::testing::EmulatedGpuGroup::served;
  std::vector<std::vector<double>> parallel;
  {
    DefaultDeviceScope on(Device::gpu(0));
    parallel = train(true, "adam", &parallel_evaluation);
  }
  EXPECT_GT(keras::testing::EmulatedGpuGroup::served, served_before)
      << "the gradient buckets were reduced by the GPU twin";
  ASSERT_EQ(single.size(), parallel.size());
  for (std::size_t w = 0; w < single.size(); ++w) {
    keras::testing::expect_close(parallel[w], single[w], 1e-5, "weight " + std::to_string(w));
  }
  EXPECT_NEAR(parallel_evaluation["loss"], single_evaluation["loss"], 1e-5);
  clear_session();  // its variables live in the emulated GPU's memory
}

// A GPU checks labels without waiting and reports a bad one at the next read, the epoch's logs:
// the process whose rows had it raises the loss's message, and the others stop with it at once
// instead of waiting in their next collective until its deadline.
TEST(DataParallelTraining, ABadLabelOnOneGpuStopsEveryProcess) {
  if (gpu::device_count() > 0) GTEST_SKIP() << "counts on the emulated GPU's deferred check";
  keras::testing::ScopedGpuEmulation emulation;
  kd::ScopedGpuWorldOverride gpus(std::make_shared<keras::testing::EmulatedGpuGroup>(kd::world_pointer()));
  clear_session();
  kd::set_distribution(std::make_shared<kd::DataParallel>());
  set_random_seed(8);
  Dataset data = make_dataset(64);
  // The last process's copy of the labels names a fourth class in every row.
  Tensor labels = rank() == size() - 1 ? Tensor::full({64}, 3.0, int64) : data.y;
  auto started = std::chrono::steady_clock::now();
  {
    DefaultDeviceScope on(Device::gpu(0));
    Sequential model({layers::Dense(8, "relu"), layers::Dense(3)});
    model.compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true));
    auto fit = [&] { model.fit(data.x, labels, {.batch_size = 16, .epochs = 1, .verbose = 0}); };
    if (rank() == size() - 1) {
      expect_throw_with<ValueError>(fit, "label 3 is out of range for 3 classes");
    } else {
      expect_throw_with<Error>(fit, "failed on another process");
    }
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 20.0);
  kd::set_distribution(nullptr);
  clear_session();
}

// What the small model never reached: several buckets, gradients of 1 MiB or more reduced in
// place, two of them aliased (a + b hands both the same gradient tensor), and a float64
// variable beside float32 ones.
class AliasedPair : public Layer {
 public:
  explicit AliasedPair(std::int64_t units) : Layer("aliased_pair", ""), units_(units) {}
  void build(const Shape& input_shape) override {
    a_ = add_weight("a", {input_shape.back(), units_}, initializers::glorot_uniform());
    b_ = add_weight("b", {input_shape.back(), units_}, initializers::glorot_uniform());
  }
  Tensor call(const Tensor& x, bool) override { return ops::relu(ops::matmul(x, a_ + b_)); }

 private:
  std::int64_t units_;
  Tensor a_, b_;
};

class Float64Scale : public Layer {
 public:
  Float64Scale() : Layer("float64_scale", "") {}
  void build(const Shape& input_shape) override {
    scale_ = add_weight("scale", {input_shape.back()}, initializers::ones(), true, float64);
  }
  Tensor call(const Tensor& x, bool) override { return x * ops::cast(scale_, float32); }

 private:
  Tensor scale_;
};

// The weights, then each weight's optimizer state (SGD's velocity), made whole on every
// process by gather_optimizer_state() unless `gather_state` is false.
std::vector<std::vector<double>> train_wide(bool data_parallel, std::size_t* buckets,
                                            std::size_t* in_place, bool gather_state = true) {
  clear_session();
  kd::set_distribution(data_parallel ? std::make_shared<kd::DataParallel>() : nullptr);
  set_random_seed(77);
  Tensor x = ops::random({RandomDistribution::normal, 0, 1, 31}, {48, 64});
  Tensor y = ops::cast(ops::random({RandomDistribution::uniform, 0, 3, 32}, {48}, float64), int64);
  // Gradient sizes: 512x512 float32 pair = 1 MiB each (in place), 512x384 = 0.75 MiB and
  // 384x256 = 0.375 MiB (bucketed: more than the 1 MiB first bucket, so two buckets).
  Sequential model({layers::Dense(512, "relu"), AliasedPair(512), layers::Dense(384, "relu"),
                    layers::Dense(256, "tanh"), Float64Scale(), layers::Dense(3)});
  // SGD: an update proportional to the gradient shows a gradient summed twice as it is (Adam
  // normalises it away) and keeps float32 rounding differences at their own size.
  model.compile(optimizers::SGD(0.05, 0.9), losses::SparseCategoricalCrossentropy(true));
  model.fit(x, y, {.batch_size = 16, .epochs = 2, .verbose = 0});
  if (data_parallel) {
    *buckets = model.gradient_reducer()->bucket_count();
    // Reduced whole in place, or reduce-scattered and updated by blocks (gradient_reducer.h).
    *in_place = model.gradient_reducer()->in_place_count() +
                model.gradient_reducer()->block_updated_count();
  }
  std::vector<std::vector<double>> weights;
  for (const Tensor& weight : model.weights()) weights.push_back(weight.to_vector<double>());
  if (gather_state) model.gather_optimizer_state();
  for (const Tensor& weight : model.weights()) {
    for (const Tensor& slot : model.optimizer().slots_of(weight)) weights.push_back(slot.to_vector<double>());
  }
  kd::set_distribution(nullptr);
  return weights;
}

// The buckets as on one machine (on a slow link the reducer would pack them: the next test).
class FixedBuckets {
 public:
  explicit FixedBuckets(const char* sizing = "as_on_one_machine") { setenv("KERAS_GRADIENT_BUCKETS", sizing, 1); }
  ~FixedBuckets() { unsetenv("KERAS_GRADIENT_BUCKETS"); }
  FixedBuckets(const FixedBuckets&) = delete;
  FixedBuckets& operator=(const FixedBuckets&) = delete;
};

TEST(DataParallelTraining, WideModelWithBucketsInPlaceAliasedAndFloat64MatchesOneProcess) {
  FixedBuckets fixed;
  std::size_t buckets = 0, in_place = 0;
  auto single = train_wide(false, nullptr, nullptr);
  auto parallel = train_wide(true, &buckets, &in_place);
  EXPECT_GE(buckets, 2u);
  EXPECT_EQ(in_place, 2u);  // the aliased pair
  ASSERT_EQ(single.size(), parallel.size());
  for (std::size_t w = 0; w < single.size(); ++w) {
    keras::testing::expect_close(parallel[w], single[w], 1e-5, "weight " + std::to_string(w));
  }
}

// The aliased pair is updated by blocks: during training each process keeps only its block of
// the velocity current, and fit() makes the state whole before it returns (without that, the
// other processes' blocks differed from the one-process run by more than 1e-3 here).
// Packed for a slow link (BucketOptions::size_by_link): every gradient in buckets, the aliased
// pair included (one bucket's all-reduce sums each of its members once), the step flag riding
// the last bucket; the same numbers.
TEST(DataParallelTraining, WideModelPackedIntoBucketsMatchesOneProcess) {
  FixedBuckets packed("packed");
  std::size_t buckets = 0, in_place = 0;
  auto single = train_wide(false, nullptr, nullptr);
  auto parallel = train_wide(true, &buckets, &in_place);
  EXPECT_GE(buckets, 1u);
  EXPECT_EQ(in_place, 0u);
  ASSERT_EQ(single.size(), parallel.size());
  for (std::size_t w = 0; w < single.size(); ++w) {
    keras::testing::expect_close(parallel[w], single[w], 1e-5, "weight " + std::to_string(w));
  }
}

// Gradient compression: the buckets and the in-place gradient travel as bfloat16 (half the
// bytes), the step flag still rides, and the sums (small integers, exact in bfloat16) come
// back as float32 gradients.
TEST(DataParallelTraining, CompressedGradientsTravelInBfloat16) {
  std::vector<Tensor> variables = {Tensor::zeros({600, 600}, float32), Tensor::zeros({10}, float32)};
  for (Tensor& variable : variables) variable.set_requires_grad(true);
  kd::BucketOptions options;
  options.size_by_link = false;
  options.compress_to_bfloat16 = true;
  kd::GradientReducer reducer(kd::world_pointer(), variables, options, true, /*shard_updates=*/true);
  EXPECT_TRUE(reducer.compresses());
  EXPECT_EQ(reducer.block_updated_count(), 0u) << "compression keeps whole updates";
  ASSERT_TRUE(reducer.flag_rides_gradients());
  reducer.set_step_flag(rank() == 0);
  for (Tensor& variable : variables) {
    variable.set_grad(Tensor::full(variable.shape(), static_cast<double>(rank() + 1), float32));
    reducer.gradient_ready(variable);
  }
  reducer.finish();
  for (const Tensor& variable : variables) {
    EXPECT_EQ(variable.grad().dtype(), float32);
    EXPECT_EQ(variable.grad().to_vector<float>()[7], static_cast<float>(size() * (size() + 1) / 2));
  }
  EXPECT_TRUE(reducer.step_flag_on_any_process());
  // (600 * 600 + 10 + the flag) elements: 2 bytes each on the wire instead of 4.
  EXPECT_EQ(reducer.last_uncompressed_bytes(), 4 * (600 * 600 + 11));
  EXPECT_EQ(reducer.last_wire_bytes(), 2 * (600 * 600 + 11));
}

class EnvironmentVariable {
 public:
  EnvironmentVariable(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~EnvironmentVariable() { unsetenv(name_); }
  EnvironmentVariable(const EnvironmentVariable&) = delete;
  EnvironmentVariable& operator=(const EnvironmentVariable&) = delete;

 private:
  const char* name_;
};

// Trained with compressed gradients, the model stays within bfloat16's resolution of one
// process's (Adam divides each update by the gradient's own scale, so a gradient off by
// 2^-9 relative moves a weight by about as much of the learning rate per step: 18 steps of
// 0.01 give at most ~4e-4; 1e-2 leaves room for the dynamics), and every process holds the same
// replica.
TEST(DataParallelTraining, CompressedGradientsTrainAsOneProcessWithinBfloat16) {
  EnvironmentVariable compression("KERAS_GRADIENT_COMPRESSION", "bfloat16");
  std::map<std::string, double> single_evaluation, parallel_evaluation;
  auto single = train(false, "adam", &single_evaluation);
  auto parallel = train(true, "adam", &parallel_evaluation);
  ASSERT_EQ(single.size(), parallel.size());
  for (std::size_t w = 0; w < single.size(); ++w) {
    keras::testing::expect_close(parallel[w], single[w], 1e-2, "weight " + std::to_string(w));
  }
  EXPECT_NEAR(parallel_evaluation["loss"], single_evaluation["loss"], 1e-2);
  Tensor first = Tensor::from_vector(parallel[0], {std::int64_t(parallel[0].size())});
  Tensor low = first.clone(), high = first.clone();
  kd::world().all_reduce(low, kd::ReduceOperation::min);
  kd::world().all_reduce(high, kd::ReduceOperation::max);
  EXPECT_EQ(low.to_vector<double>(), high.to_vector<double>());
}

// Under mixed_bfloat16 every process computes its rows in bfloat16 and the float32 gradients
// are summed in float32: the weights stay within bfloat16's resolution of one process's
// (rounding falls at other points when each process holds fewer rows).
TEST(DataParallelTraining, MixedBfloat16MatchesOneProcessWithinBfloat16) {
  mixed_precision::set_global_policy("mixed_bfloat16");
  std::map<std::string, double> single_evaluation, parallel_evaluation;
  auto single = train(false, "adam", &single_evaluation);
  auto parallel = train(true, "adam", &parallel_evaluation);
  mixed_precision::set_global_policy("float32");
  ASSERT_EQ(single.size(), parallel.size());
  for (std::size_t w = 0; w < single.size(); ++w) {
    keras::testing::expect_close(parallel[w], single[w], 2e-2, "weight " + std::to_string(w));
  }
  EXPECT_NEAR(parallel_evaluation["accuracy"], single_evaluation["accuracy"], 0.02);
}

// LossScaleOptimizer under DataParallel: the finiteness check reads the all-reduced
// gradients, so an overflow on one process skips the step, and halves the scale, on all.
TEST(DataParallelTraining, LossScalingDecidesAlikeOnEveryProcess) {
  clear_session();
  kd::set_distribution(std::make_shared<kd::DataParallel>());
  Sequential model({layers::Dense(3)});
  auto optimizer = std::make_shared<optimizers::LossScaleOptimizer<optimizers::SGD>>(optimizers::SGD(0.1), 1024.0, 1000);
  model.compile(optimizer, "mse");
  // Process 0's rows hold an input so large that its float32 gradient overflows.
  Tensor x = Tensor::full({2 * size(), 4}, 1.0, float32);
  Tensor y = Tensor::zeros({2 * size(), 3}, float32);
  std::vector<float> big(static_cast<std::size_t>(2 * size() * 4), 1.0f);
  big[0] = 3e36f;
  Tensor x_overflow = Tensor::from_vector(big, {2 * size(), 4});
  model.fit(x, y, {.batch_size = 2 * size(), .epochs = 1, .shuffle = false, .verbose = 0});
  EXPECT_EQ(optimizer->loss_scale(), 1024.0);
  std::vector<double> before = model.weights()[0].to_vector<double>();
  model.fit(x_overflow, y, {.batch_size = 2 * size(), .epochs = 1, .shuffle = false, .verbose = 0});
  EXPECT_EQ(optimizer->loss_scale(), 512.0) << "every process halves";
  EXPECT_EQ(model.weights()[0].to_vector<double>(), before) << "and skips the update";
  EXPECT_EQ(optimizer->iterations(), 1);
  kd::set_distribution(nullptr);
}

// The step flag rides the last bucket: any process's true is every process's, a step that
// sets none sends false; packed buckets take the large gradient in too, and the sums are right.
TEST(DataParallelTraining, StepFlagRidesTheGradientsAndIsTrueWhereAnyProcessSetIt) {
  std::vector<Tensor> variables = {Tensor::zeros({600, 600}, float32), Tensor::zeros({10}, float32)};
  for (Tensor& variable : variables) variable.set_requires_grad(true);
  kd::BucketOptions packed;
  packed.packed = true;
  kd::GradientReducer reducer(kd::world_pointer(), variables, packed);
  EXPECT_TRUE(reducer.packed_for_latency());
  EXPECT_EQ(reducer.in_place_count(), 0u);
  ASSERT_TRUE(reducer.flag_rides_gradients());
  auto step = [&](bool flag, bool set) {
    if (set) reducer.set_step_flag(flag);
    for (Tensor& variable : variables) {
      variable.set_grad(Tensor::full(variable.shape(), static_cast<double>(rank() + 1), float32));
      reducer.gradient_ready(variable);
    }
    reducer.finish();
    EXPECT_EQ(variables[0].grad().to_vector<float>()[12345], static_cast<float>(size() * (size() + 1) / 2));
    return reducer.step_flag_on_any_process();
  };
  EXPECT_TRUE(step(rank() == size() - 1, true));
  EXPECT_FALSE(step(false, true));
  EXPECT_TRUE(step(true, true));
  EXPECT_FALSE(step(true, false)) << "a step that sets no flag sends false";
}

TEST(DataParallelTraining, OptimizerStateUpdatedByBlocksIsWholeAfterFit) {
  FixedBuckets fixed;
  std::size_t buckets = 0, in_place = 0;
  auto single = train_wide(false, nullptr, nullptr);
  auto parallel = train_wide(true, &buckets, &in_place, /*gather_state=*/false);
  ASSERT_EQ(single.size(), parallel.size());
  for (std::size_t w = single.size() / 2; w < single.size(); ++w) {
    keras::testing::expect_close(parallel[w], single[w], 1e-5, "optimizer state " + std::to_string(w));
  }
}

TEST(DataParallelTraining, DifferentArgumentsOnOneRankAreAnError) {
  clear_session();
  kd::set_distribution(std::make_shared<kd::DataParallel>());
  Dataset data = make_dataset(64);
  Sequential model({layers::Dense(3)});
  model.compile("sgd", "sparse_categorical_crossentropy");
  std::int64_t batch = rank() == 0 ? 16 : 32;
  expect_throw_with<ValueError>([&] { model.fit(data.x, data.y, {.batch_size = batch, .verbose = 0}); },
                                "different arguments");
  expect_throw_with<ValueError>(
      [&] { model.fit(data.x, data.y, {.batch_size = size() * 8 + 1, .verbose = 0}); },
      "divisible");
  kd::set_distribution(nullptr);
}

// Process 0 alone opens a CSVLogger's file and writes a backup; when it cannot, every process
// must stop at once with an error (the others used to go on into the first step's all-reduce
// and wait there for the collective deadline).
TEST(DataParallelTraining, AFileOnlyProcessZeroOpensFailsEveryProcess) {
  clear_session();
  kd::set_distribution(std::make_shared<kd::DataParallel>());
  Dataset data = make_dataset(64);
  Sequential model({layers::Dense(3)});
  model.compile("sgd", "sparse_categorical_crossentropy");
  model.predict(ops::slice(data.x, {0, 0}, {1, data.x.dim(1)}));
  const std::string missing = "/proc/keras_cannot_exist/sub";  // not creatable, even by root
  auto logger = std::make_shared<CSVLogger>(missing + "/history.csv");
  auto fit_with = [&](CallbackPtr callback) {
    model.fit(data.x, data.y, {.batch_size = 16, .epochs = 1, .callbacks = {callback}, .verbose = 0});
  };
  auto started = std::chrono::steady_clock::now();
  if (rank() == 0) {
    expect_throw_with<FileNotFoundError>([&] { fit_with(logger); }, "cannot open");
  } else {
    expect_throw_with<Error>([&] { fit_with(logger); }, "failed on another process");
  }
  auto backup = std::make_shared<BackupAndRestore>(missing);
  if (rank() == 0) {
    expect_throw_with<FileNotFoundError>([&] { fit_with(backup); }, "cannot create backup_dir");
  } else {
    expect_throw_with<Error>([&] { fit_with(backup); }, "failed on another process");
  }
  // Well inside the collective deadline (60 s in CTest): nobody waited for it.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 20.0);
  // And the communicator is still usable: no collective was abandoned.
  std::vector<double> one = {1.0};
  kd::world().all_reduce(one.data(), 1, DType::float64, kd::ReduceOperation::sum);
  EXPECT_EQ(one[0], static_cast<double>(size()));
  kd::set_distribution(nullptr);
}

}  // namespace
}  // namespace keras

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  keras::kd::initialize();
  // Only rank 0 reports; the exit status is the worst over all ranks.
  if (keras::kd::process_id() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int status = RUN_ALL_TESTS();
  keras::kd::world().all_reduce(&status, 1, keras::DType::int32,
                                          keras::kd::ReduceOperation::max);
  keras::kd::finalize();
  return status;
}
