// What a process remembers after one of its collectives failed. A failed collective (a timeout,
// ranks that disagree, an MPI error) can leave other processes inside a collective that will
// never complete, and an abandoned non-blocking exchange still owns its buffers; so after any
// failure the process must not finalize normally (MPI_Finalize would wait for the peers, which
// wait for us). finalize() reads this record and ends the whole job with
// the first failure's message instead (MPI_Abort under mpirun).
#pragma once
#include <optional>
#include <string>

namespace keras::distribution {

// Keeps the first failure's message (later ones are consequences of it).
void record_collective_failure(const std::string& message);
// The first failure of this process, if any.
std::optional<std::string> collective_failure();

}  // namespace keras::distribution
