// all_reduce_perf --backend nccl: our NcclCommunicator::all_reduce beside raw ncclAllReduce on
// a communicator of the same GPUs, on device buffers, in nccl-tests' columns. Compiled with
// NCCL only; nccl_all_reduce_unavailable.cpp answers otherwise.
#pragma once
#include <cstdint>
#include <string>

struct NcclBenchmarkOptions {
  std::int64_t minimum_bytes, maximum_bytes, factor, iterations, warmup_iterations, check;
  std::string type_name, operation_name;
};

// Returns the exit status (1 when a result was wrong); collective over the MPI world.
int run_nccl_all_reduce_perf(const NcclBenchmarkOptions& options);
