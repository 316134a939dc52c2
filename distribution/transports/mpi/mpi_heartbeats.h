// Heartbeats for mpirun's jobs. MPI says nothing about a peer that is frozen (SIGSTOP, a
// machine swapping to death) or cut off without a reset: the others wait inside a collective
// until its timeout (KERAS_COLLECTIVE_TIMEOUT_SECONDS, 300 s by default, because a step may
// legitimately keep peers waiting for minutes). So mpirun's jobs run the same JobMonitor as
// jobs started by hand (distribution/transports/rendezvous/job_monitor.h): process 0 serves a
// rendezvous store for it alone, on loopback when every process shares its machine and on
// KERAS_DISTRIBUTION_INTERFACE or its host name otherwise, behind a random job token that
// MPI_Bcast hands to the others; a process silent for KERAS_DISTRIBUTION_HEARTBEAT_TIMEOUT_SECONDS
// (default 10) ends the job within seconds, naming it, while a long step does not.
#pragma once
#include <mpi.h>

namespace keras::distribution {

// Registers, once, the exit handler that ends the heartbeat threads, after initializing
// libcrypto: it then runs before libcrypto's own handler (which frees what the threads use)
// and, registered before the handler that finalizes the job, after it (finalizing stops the
// monitor before the collective leave, and process 0's store only after every process left).
void end_mpi_heartbeats_at_exit();

// Collective over `world` (more than one process): starts the store on process 0 and a monitor
// on every process. CollectiveError on every process when process 0 cannot listen or a process
// cannot reach it.
void start_mpi_heartbeats(MPI_Comm world);

// This process leaves the heartbeats (its silence is no longer a fault); call before leaving
// the world collectively.
void stop_mpi_heartbeat_monitor();

// Closes process 0's store; call once every process has left the world.
void stop_mpi_heartbeat_store();

}  // namespace keras::distribution
