// Jobs started by mpirun: whether this process is one, MPI's start (with the allocator
// settings its collectives need) and its end (a collective leave, or MPI_Abort after a failed
// collective, so that no peer waits forever).
#pragma once
#include <memory>
#include <optional>

#include "distribution/runtime/communicator.h"

namespace keras::distribution {

bool launched_by_mpirun();

// Starts MPI (once per process; `at_exit` is registered to run at exit then) and returns the
// world group. num_processes and process_id, when given, must agree with mpirun's.
std::shared_ptr<Communicator> start_mpi_job(std::optional<int> num_processes,
                                            std::optional<int> process_id, void (*at_exit)());

// Leaves the job and ends MPI; `world` is released before MPI_Finalize. Does nothing (but
// release `world`) where MPI never started or has ended.
void end_mpi_job(std::shared_ptr<Communicator>& world);

}  // namespace keras::distribution
