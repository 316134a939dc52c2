// Which GPU each process uses: the one numbered by its local rank, its place among the
// processes of its host (as MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) would give under mpirun;
// here from the host names all processes exchange, so processes started by hand get the same
// rule). Chosen once, in initialize().
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "distribution/runtime/communicator.h"

namespace keras::distribution {

struct HostPlace {
  std::string host;
  int local_rank = 0;  // among the processes of `host`, in world rank order
  int local_size = 1;
};

// Collective over `world`: every process learns its place on its host.
HostPlace place_on_host(Communicator& world);

// The local rank, when the host has a GPU for it; otherwise a ValueError saying how many
// processes and GPUs the host has and what to do.
int choose_local_gpu(const HostPlace& place, int gpus_on_host);


struct GpuChoice {
  std::optional<int> gpu;            // this process's GPU, when it takes one
  std::string no_gpu_reason;         // why not, when it does not
  std::shared_ptr<Communicator> gpu_world;  // the NCCL world, with several processes and NCCL
};

// Collective over `world`: each process takes the GPU of its local rank, and with several
// processes and NCCL the GPUs form the NCCL world (also world's device twin). Where some host
// has fewer GPUs than processes, no process takes one (the NCCL world is all or nothing) and
// the job runs on CPUs; no_gpu_reason says why.
GpuChoice choose_job_gpu(const std::shared_ptr<Communicator>& world);

}  // namespace keras::distribution
