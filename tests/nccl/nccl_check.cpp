// NCCL under mpirun, one GPU per process: initialize() chooses each process's GPU and builds
// the NCCL world; collectives on device tensors give the closed-form results; DataParallel and
// ModelParallel training on the GPUs give one GPU's weights; a collective the processes disagree
// on is refused with both signatures named. Exits 77 (a CTest skip) where
// there is no GPU or no NCCL in the build, saying which.
// Run: mpirun -np N nccl_check   (N <= GPUs on the host)
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <memory>

#include "distribution/runtime/runtime.h"
#include "engine/gpu_runtime.h"
#include "keras.h"
#include "saving/checkpoint_files.h"

namespace kd = keras::distribution;
using keras::Device;
using keras::Tensor;

namespace {
int failures = 0;
void expect(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "nccl_check: FAILED: %s (rank %d)\n", what, kd::process_id());
    ++failures;
  }
}
}  // namespace

int main() {
  if (keras::gpu::device_count() == 0) {
    std::printf("nccl_check: skipped: no GPU here (%s)\n", keras::gpu::description().c_str());
    return 77;
  }
  kd::initialize();
  int size = kd::num_processes(), rank = kd::process_id();
  auto nccl = kd::gpu_world();
  if (!nccl) {
    std::printf("nccl_check: skipped: %s\n", size == 1 ? "one process (run under mpirun -np 2+)"
                                                       : "this build has no NCCL");
    return 77;
  }
  Device gpu = Device::gpu(kd::require_local_gpu());
  // all_reduce: sum of (rank + 1) over ranks = size (size + 1) / 2; mean of that / size.
  Tensor x = Tensor::full({1 << 20}, rank + 1.0, keras::float32, gpu);
  nccl->all_reduce(x, kd::ReduceOperation::sum);
  expect(x.to_vector<double>()[12345] == size * (size + 1) / 2.0, "all_reduce sum");
  Tensor y = Tensor::full({1000}, rank + 1.0, keras::float64, gpu);
  nccl->all_reduce(y, kd::ReduceOperation::mean);
  expect(y.to_vector<double>()[999] == (size + 1) / 2.0, "all_reduce mean (ncclAvg)");
  Tensor gathered = nccl->all_gather(Tensor::full({3}, rank, keras::int64, gpu));
  expect(gathered.to_vector<std::int64_t>()[3 * (size - 1)] == size - 1, "all_gather");
  Tensor scattered = nccl->reduce_scatter(Tensor::ones({size * 4}, keras::float32, gpu));
  expect(scattered.size() == 4 && scattered.to_vector<double>()[0] == size, "reduce_scatter");
  Tensor root = Tensor::full({5}, rank == 0 ? 7.0 : -1.0, keras::float32, gpu);
  nccl->broadcast(root, 0);
  expect(root.to_vector<float>()[4] == 7.0f, "broadcast");
  nccl->barrier();
  // DataParallel over the GPUs gives the weights of one GPU training on the whole batches.
  {
    keras::DefaultDeviceScope on_gpu(gpu);
    keras::RandomSpec spec{keras::RandomDistribution::uniform, -1.0, 1.0, 5};
    Tensor features = keras::ops::random(spec, {128, 4}, keras::float32);
    Tensor labels = keras::ops::argmax(features, 1);
    auto named = [](const char* name) {
      keras::layers::DenseOptions options;
      options.name = name;
      return options;
    };
    auto train = [&] {
      keras::clear_session();
      keras::set_random_seed(9);
      keras::Sequential model({keras::layers::Dense(16, "relu", named("hidden")),
                               keras::layers::Dense(4, "", named("head"))});
      model.compile(keras::optimizers::Adam(0.01),
                    keras::losses::SparseCategoricalCrossentropy(true), {"accuracy"});
      model.fit(features, labels, {.batch_size = 32, .epochs = 2, .shuffle = false, .verbose = 0});
      std::vector<double> weights;
      keras::NoGradGuard no_grad;
      for (const Tensor& w : model.weights()) {
        expect(w.device() == gpu, "variables live on the process's GPU");
        // A sharded weight is gathered whole (over NCCL).
        for (double value : keras::checkpoint::full_tensor(w, w).to_vector<double>()) weights.push_back(value);
      }
      return weights;
    };
    std::vector<double> alone = train();
    kd::set_distribution(std::make_shared<kd::DataParallel>());
    std::vector<double> together = train();
    kd::set_distribution(nullptr);
    double largest = 0;
    for (std::size_t i = 0; i < alone.size(); ++i) {
      largest = std::max(largest, std::abs(alone[i] - together[i]));
    }
    std::printf("nccl_check: rank %d: DataParallel on %d GPUs against one GPU: largest weight "
                "difference %.3g\n", rank, size, largest);
    expect(alone.size() == together.size() && largest <= 1e-5,
           "DataParallel on the GPUs gives one GPU's weights within 1e-5");
    // ModelParallel: the hidden layer split by columns, the head by rows, over a "model" axis
    // of every GPU; its all-gathers and all-reduces go through the mesh axis' NCCL split.
    auto mesh = std::make_shared<kd::DeviceMesh>(std::vector<std::int64_t>{1, size},
                                                 std::vector<std::string>{"batch", "model"});
    auto layouts = std::make_shared<kd::LayoutMap>(mesh);
    (*layouts)[".*hidden/kernel"] = {std::nullopt, "model"};
    (*layouts)[".*hidden/bias"] = {"model"};
    (*layouts)[".*head/kernel"] = {"model", std::nullopt};
    kd::set_distribution(std::make_shared<kd::ModelParallel>(layouts));
    std::vector<double> sharded = train();
    kd::set_distribution(nullptr);
    largest = 0;
    for (std::size_t i = 0; i < alone.size() && i < sharded.size(); ++i) {
      largest = std::max(largest, std::abs(alone[i] - sharded[i]));
    }
    std::printf("nccl_check: rank %d: ModelParallel on %d GPUs against one GPU: largest weight "
                "difference %.3g\n", rank, size, largest);
    expect(alone.size() == sharded.size() && largest <= 1e-5,
           "ModelParallel on the GPUs gives one GPU's weights within 1e-5");
  }
  // A CPU tensor is refused with what to do.
  try {
    Tensor on_cpu = Tensor::ones({2});
    nccl->all_reduce(on_cpu);
    expect(false, "a CPU tensor was accepted");
  } catch (const keras::ValueError& error) {
    expect(std::string(error.what()).find("move the tensor to its GPU") != std::string::npos,
           "the CPU-tensor message says what to do");
  }
  // Disagreeing ranks: rank 0 reduces 8 elements, the others 9. Refused, not hung.
  try {
    Tensor odd = Tensor::ones({rank == 0 ? 8 : 9}, keras::float32, gpu);
    nccl->all_reduce(odd);
    expect(false, "a mismatched all_reduce was accepted");
  } catch (const kd::CollectiveError& error) {
    expect(std::string(error.what()).find("the ranks disagree on the collective") != std::string::npos,
           "the mismatch names both signatures");
  }
  std::printf("nccl_check: rank %d of %d on gpu:%d: %s\n", rank, size, gpu.index,
              failures == 0 ? "passed" : "FAILED");
  std::fflush(stdout);
  // The mismatch recorded a collective failure, so finalize() ends the job; leave with our
  // own status first.
  std::_Exit(failures == 0 ? 0 : 1);
}
