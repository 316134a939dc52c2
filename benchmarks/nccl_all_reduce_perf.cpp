// all_reduce_perf --backend nccl (see the header). Each measurement: a barrier, `warmup`
// untimed calls, then `iterations` calls queued back to back and one wait for the device's
// compute stream (ours orders itself against that stream; raw NCCL is launched on it), so a
// call's time is the wall time over `iterations`, the slowest rank's, as nccl-tests reports.
// Out of place is a device copy and our in-place call for us, ncclAllReduce(send, receive) raw.
#include "benchmarks/nccl_all_reduce_perf.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "distribution/transports/nccl/nccl_communicator.h"
#include "distribution/runtime/runtime.h"
#include "engine/gpu_runtime.h"
#include "keras.h"

namespace {

namespace kd = keras::distribution;
using keras::DType;

void check_nccl(ncclResult_t result, const char* call) {
  if (result != ncclSuccess) throw std::runtime_error(std::string(call) + ": " + ncclGetErrorString(result));
}
void check_cuda(cudaError_t status, const char* call) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(status));
}

struct Type {
  DType dtype;
  ncclDataType_t nccl;
  const char* name;  // nccl-tests' names
};
Type type_of(const std::string& name) {
  if (name == "float") return {DType::float32, ncclFloat32, "float"};
  if (name == "double") return {DType::float64, ncclFloat64, "double"};
  if (name == "int32") return {DType::int32, ncclInt32, "int32"};
  if (name == "int64") return {DType::int64, ncclInt64, "int64"};
  throw std::runtime_error("-d: '" + name + "' is not float, double, int32 or int64");
}

struct Operation {
  kd::ReduceOperation ours;
  ncclRedOp_t nccl;
};
Operation operation_of(const std::string& name) {
  if (name == "sum") return {kd::ReduceOperation::sum, ncclSum};
  if (name == "max") return {kd::ReduceOperation::max, ncclMax};
  if (name == "min") return {kd::ReduceOperation::min, ncclMin};
  if (name == "mean") return {kd::ReduceOperation::mean, ncclAvg};
  throw std::runtime_error("-o: '" + name + "' is not sum, max, min or mean");
}

enum Variant { ours_out_of_place, ours_in_place, raw_out_of_place, raw_in_place, variant_count };

}  // namespace

int run_nccl_all_reduce_perf(const NcclBenchmarkOptions& options) {
  int size = kd::num_processes(), rank = kd::process_id();
  std::optional<int> gpu = kd::require_local_gpu();
  std::shared_ptr<kd::Communicator> ours = kd::gpu_world();
  if (!ours) ours = std::make_shared<kd::NcclCommunicator>(kd::world_pointer(), *gpu, "world");
  Type type = type_of(options.type_name);
  Operation operation = operation_of(options.operation_name);
  keras::Device device = keras::Device::gpu(*gpu);
  auto stream = static_cast<cudaStream_t>(keras::gpu::compute_stream(*gpu));

  ncclUniqueId id{};
  if (rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t raw = nullptr;
  check_nccl(ncclCommInitRank(&raw, size, id, rank), "ncclCommInitRank");

  std::size_t element = keras::dtype_size(type.dtype);
  std::int64_t largest = options.maximum_bytes / static_cast<std::int64_t>(element);
  // Rank r sends r + 1 everywhere: sum size(size+1)/2, max size, min 1, mean (size+1)/2.
  keras::Tensor send = keras::Tensor::full({largest}, rank + 1.0, type.dtype, device);
  keras::Tensor receive = keras::Tensor::zeros({largest}, type.dtype, device);
  double expected = options.operation_name == "sum"    ? size * (size + 1) / 2.0
                    : options.operation_name == "max"  ? size
                    : options.operation_name == "min"  ? 1.0
                                                       : (size + 1) / 2.0;
  if (options.operation_name == "mean" && keras::is_integer(type.dtype)) {
    expected = static_cast<double>((size + 1) / 2);  // the integer mean truncates
  }

  auto call = [&](int variant, std::int64_t count) {
    void* out = receive.raw_data();
    switch (variant) {
      case ours_out_of_place:
        check_cuda(cudaMemcpyAsync(out, send.raw_data(), static_cast<std::size_t>(count) * element,
                                   cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
        ours->all_reduce(out, count, type.dtype, operation.ours);
        break;
      case ours_in_place: ours->all_reduce(out, count, type.dtype, operation.ours); break;
      case raw_out_of_place:
        check_nccl(ncclAllReduce(send.raw_data(), out, static_cast<std::size_t>(count), type.nccl,
                                 operation.nccl, raw, stream), "ncclAllReduce");
        break;
      default:
        check_nccl(ncclAllReduce(out, out, static_cast<std::size_t>(count), type.nccl,
                                 operation.nccl, raw, stream), "ncclAllReduce");
    }
  };

  struct Row {
    std::int64_t bytes, count;
    double microseconds[variant_count];
    std::int64_t wrong[variant_count];
  };
  std::vector<Row> rows;
  for (std::int64_t bytes = options.minimum_bytes; bytes <= options.maximum_bytes;
       bytes *= options.factor) {
    std::int64_t count = bytes / static_cast<std::int64_t>(element);
    if (count == 0) continue;
    Row row{count * static_cast<std::int64_t>(element), count, {}, {}};
    for (int variant = 0; variant < variant_count; ++variant) {
      // In place starts from the send values each time: refill, then one checked call.
      auto refill = [&] {
        check_cuda(cudaMemcpyAsync(receive.raw_data(), send.raw_data(),
                                   static_cast<std::size_t>(count) * element,
                                   cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
      };
      refill();
      call(variant, count);
      std::int64_t wrong = 0;
      if (options.check == 1) {
        std::vector<double> values = keras::Tensor::view_of(receive, 0, {count}).to_vector<double>();
        for (double value : values) wrong += value != expected;
      }
      for (std::int64_t i = 0; i < options.warmup_iterations; ++i) call(variant, count);
      keras::gpu::synchronize(*gpu);
      MPI_Barrier(MPI_COMM_WORLD);
      auto begin = std::chrono::steady_clock::now();
      for (std::int64_t i = 0; i < options.iterations; ++i) call(variant, count);
      keras::gpu::synchronize(*gpu);
      double local = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - begin).count() /
                     static_cast<double>(options.iterations);
      MPI_Allreduce(&local, &row.microseconds[variant], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      MPI_Allreduce(&wrong, &row.wrong[variant], 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    }
    rows.push_back(row);
  }
  ncclCommDestroy(raw);
  std::int64_t wrong_total = 0;
  for (const Row& row : rows) {
    for (std::int64_t wrong : row.wrong) wrong_total += wrong;
  }
  if (rank != 0) return wrong_total > 0 ? 1 : 0;

  int version = 0;
  ncclGetVersion(&version);
  std::printf("# all_reduce_perf --backend nccl: keras-cpp NcclCommunicator::all_reduce vs raw "
              "ncclAllReduce, %d processes x 1 GPU, NCCL %d, dtype %s, op %s\n",
              size, version, type.name, options.operation_name.c_str());
  double bus_factor = size > 1 ? 2.0 * (size - 1) / size : 1.0;
  auto table = [&](const char* title, int out_of_place, int in_place) {
    std::printf("#\n# %s\n", title);
    std::printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "size", "count",
                "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                "busbw", "#wrong");
    std::printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "(B)", "(elements)",
                "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    for (const Row& row : rows) {
      auto columns = [&](int variant) {
        double algbw = static_cast<double>(row.bytes) / row.microseconds[variant] / 1e3;
        std::printf(" %9.1f %7.2f %7.2f %6lld", row.microseconds[variant], algbw,
                    algbw * bus_factor, static_cast<long long>(row.wrong[variant]));
      };
      std::printf("%12lld %12lld %8s %6s %6d", static_cast<long long>(row.bytes),
                  static_cast<long long>(row.count), type.name, options.operation_name.c_str(), -1);
      columns(out_of_place);
      columns(in_place);
      std::printf("\n");
    }
  };
  table("keras-cpp NcclCommunicator::all_reduce (out-of-place = device copy + in place)",
        ours_out_of_place, ours_in_place);
  table("raw ncclAllReduce on the device's compute stream", raw_out_of_place, raw_in_place);
  std::printf("#\n# ratio keras-cpp / raw NCCL busbw\n# %10s  %12s  %12s\n", "size (B)",
              "out-of-place", "in-place");
  for (const Row& row : rows) {
    std::printf("%12lld  %12.3f  %12.3f\n", static_cast<long long>(row.bytes),
                row.microseconds[raw_out_of_place] / row.microseconds[ours_out_of_place],
                row.microseconds[raw_in_place] / row.microseconds[ours_in_place]);
  }
  std::fflush(stdout);
  return wrong_total > 0 ? 1 : 0;
}
