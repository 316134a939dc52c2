// all_reduce_perf --backend nccl in a build without NCCL.
#include <stdexcept>

#include "benchmarks/nccl_all_reduce_perf.h"

int run_nccl_all_reduce_perf(const NcclBenchmarkOptions&) {
  throw std::runtime_error("--backend nccl: this build has no NCCL (it needs the CUDA toolkit's "
                           "nccl.h and libnccl)");
}
