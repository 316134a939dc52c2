// Jobs started by hand, without mpirun: process 0 serves the rendezvous store
// (distribution/transports/rendezvous/), every process joins it and checks that all were started for the
// same job, and the world is then a Gloo group. A monitor thread ends this process within a
// poll period when another one fails or process 0 goes; leaving waits for every process, so
// that process 0 keeps the store up until the last one is done with it.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distribution/runtime/communicator.h"
#include "distribution/transports/rendezvous/job_token.h"

namespace keras::distribution {

// Joins the job at addresses[0] (the coordinator) as `process_id` of `processes` and returns
// the world group. ValueError for a job the processes disagree on; CollectiveError when some
// did not join within KERAS_DISTRIBUTION_INIT_TIMEOUT_SECONDS (default 120).
std::shared_ptr<Communicator> join_job_by_rendezvous(const std::vector<std::string>& addresses,
                                                     int processes, int process_id,
                                                     const std::optional<JobToken>& token);
bool joined_by_rendezvous();

// Ends this process's part of the job. After a failed collective it says so in the store (the
// peers' monitors end them) and ends the process; otherwise it leaves `world` collectively,
// releases it, and leaves the store.
void leave_job_by_rendezvous(std::shared_ptr<Communicator>& world);

}  // namespace keras::distribution
