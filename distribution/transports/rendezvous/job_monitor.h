// Heartbeats: how a job notices, within seconds, a process that stopped answering (frozen,
// cut off, its machine gone) while a process that computes for minutes is left alone. Every
// process runs a JobMonitor, a thread of its own with its own connection to process 0's
// rendezvous store (store_server.h): jobs started by hand use the store they joined by, and
// mpirun's jobs one that process 0 starts for this alone (distribution/transports/mpi/mpi_job.cpp),
// because neither MPI nor Gloo says anything about a peer that is silent but connected.
//
// - every process writes a heartbeat ("alive/<id>", a counter) every 100 ms (up to 1 s in jobs
//   of more than 25 processes), and reads
//   "job/failed", where a process that failed says why;
// - process 0 (whose store this is) checks everyone's heartbeat every second: one that has not
//   moved for the heartbeat timeout is a frozen process, a cut link or a machine gone, and the
//   job fails naming it;
// - the other processes notice process 0 itself by its store: a request unanswered for the
//   heartbeat timeout (process 0 frozen, or this process cut off) or a closed connection.
// A monitor that ends the job prints why on stderr and ends this process at once
// (std::_Exit(1)): under mpirun, mpirun then ends the rest, as after MPI_Abort.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "distribution/transports/rendezvous/job_token.h"
#include "distribution/transports/rendezvous/store_client.h"

namespace keras::distribution {

// KERAS_DISTRIBUTION_HEARTBEAT_TIMEOUT_SECONDS (default 10, 0.3 to 86400): how long a process
// may stay silent before the job declares it dead. JAX's coordination service waits 100 s,
// PyTorch's NCCL watchdog 10 minutes; a step that computes for longer is not silence.
std::chrono::milliseconds heartbeat_timeout();

class JobMonitor {
 public:
  // Connects to the store at host:port (within 10 s) and starts watching. CollectiveError when
  // the store does not answer.
  JobMonitor(const std::string& host, int port, int process_id, int processes, const std::optional<JobToken>& token);
  // Stops watching and marks this process as gone in the store: its silence from now on is not
  // a fault.
  ~JobMonitor();
  JobMonitor(const JobMonitor&) = delete;
  JobMonitor& operator=(const JobMonitor&) = delete;

 private:
  void watch();
  [[noreturn]] void fail(const std::string& why);
  [[noreturn]] void end(const std::string& why);
  int process_id_;
  int processes_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds period_;
  std::unique_ptr<KeyValueClient> store_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace keras::distribution
