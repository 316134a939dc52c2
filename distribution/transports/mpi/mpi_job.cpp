// Jobs started by mpirun (distribution/transports/mpi/mpi_job.h).
#include "distribution/transports/mpi/mpi_job.h"

#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <limits>

#include "distribution/runtime/collective_failure.h"
#include "distribution/api/distribution.h"
#include "distribution/transports/mpi/mpi_communicator.h"
#include "distribution/transports/mpi/mpi_heartbeats.h"
#include "engine/environment.h"

namespace keras::distribution {
namespace {

// Ends every process of the job, saying why. Used when finalizing normally could hang: this
// process's collectives failed (peers may be inside one forever), or it is leaving while peers
// still issue collectives.
[[noreturn]] void abort_job(const std::string& why) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "keras: process %d ends the whole job (MPI_Abort): %s\n", rank,
               why.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(EXIT_FAILURE);  // MPI_Abort does not return; this is for the compiler
}

}  // namespace

bool launched_by_mpirun() {
  return environment::get("OMPI_COMM_WORLD_SIZE") || environment::get("PMI_SIZE") ||
         environment::get("PMIX_RANK");
}

std::shared_ptr<Communicator> start_mpi_job(std::optional<int> num_processes,
                                            std::optional<int> process_id, void (*at_exit)()) {
  int already = 0;
  MPI_Initialized(&already);
  if (!already) {
    int provided = 0;
    // Only the main thread calls MPI (our pool's workers never do).
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    // Exit handlers run last-registered first: `at_exit` (finalize: leave, then stop the
    // heartbeats in order), then the heartbeats' own (for a process that never finalized),
    // then libcrypto's, which frees what the heartbeat threads use.
    end_mpi_heartbeats_at_exit();
    std::atexit(at_exit);
    // OpenMPI allocates and frees temporary buffers inside large collectives. With glibc's
    // defaults those come from mmap and go back to the kernel on free, so every call faults
    // its pages in again (about 14 us per 4 KiB page here): a 7.45 MB all-reduce took 4.1 ms
    // instead of 1.2 ms, and 64 MiB fell to about a third of the 16 MiB bandwidth. Serve every
    // block from the heap (no mmap at all) and never trim it.
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  }
  auto communicator = std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, "world", false);
  if (num_processes && *num_processes != communicator->size()) {
    throw ValueError(str("num_processes=", *num_processes, " disagrees with mpirun, which ",
                         "started ", communicator->size(), " processes"));
  }
  if (process_id && *process_id != communicator->rank()) {
    throw ValueError(str("process_id=", *process_id, " disagrees with this process's MPI ",
                         "rank ", communicator->rank()));
  }
  if (communicator->size() > 1) start_mpi_heartbeats(MPI_COMM_WORLD);
  return communicator;
}

void end_mpi_job(std::shared_ptr<Communicator>& world) {
  int started = 0, finished = 0;
  MPI_Initialized(&started);
  MPI_Finalized(&finished);
  if (!started || finished) {
    world.reset();
    return;
  }
  if (auto failure = collective_failure()) {
    abort_job(str("a collective of this process failed, so other processes may be waiting "
                  "inside it: ", *failure));
  }
  // Leaving is a collective too: a peer still issuing collectives learns at once that this
  // process has gone, instead of waiting out its timeout, and MPI_Finalize (which waits for
  // every process) is reached only when all of them leave.
  stop_mpi_heartbeat_monitor();  // silence from here on is leaving, not a fault
  try {
    if (world) world->leave();
  } catch (const CollectiveError& error) {
    abort_job(error.what());
  }
  stop_mpi_heartbeat_store();  // every process has left: nobody writes heartbeats any more
  clear_mesh_axis_groups();
  world.reset();
  MPI_Finalize();
}

}  // namespace keras::distribution
