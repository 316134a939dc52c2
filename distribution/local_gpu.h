// Which GPU each process uses: the one numbered by its local rank, its place among the
// processes of its host (as MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) would give under mpirun;
// here from the host names all processes exchange, so processes started by hand get the same
// rule). Chosen once, in initialize().
#pragma once
#include <string>

#include "distribution/communicator.h"

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

}  // namespace keras::distribution
