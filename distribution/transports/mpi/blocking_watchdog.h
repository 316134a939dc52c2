// Deadline for the blocking half of an MPI collective. The signature exchange before each
// collective has a deadline of its own, and once it succeeds every rank is at the same
// collective, so the blocking MPI call that follows returns within microseconds to seconds. It
// can still block forever when a peer timed out in an earlier exchange and stayed alive (its
// abandoned exchange matches ours, then it never joins the data phase). MPI has no way to
// cancel a blocking collective, so, like PyTorch's NCCL watchdog, a thread watches the call
// and, past blocking_call_limit (the group's timeout plus the larger of it and 10 s, so that a
// short timeout chosen for quick failure detection does not cut a large transfer short),
// prints why and ends this process with a failure status; mpirun then ends the rest of the
// job. Cost on the calling thread: a coarse clock read, a few stores and a 128-byte copy per
// collective; the watchdog thread wakes four times a second.
#pragma once
#include <chrono>
#include <string>

namespace keras::distribution {

std::chrono::milliseconds blocking_call_limit(std::chrono::milliseconds collective_timeout);

class BlockingCallWatch {
 public:
  // `operation` (a literal) and `group` name the call in the message; they are read only while
  // the watch is alive, that is while the call is in progress.
  BlockingCallWatch(const char* operation, const std::string* group,
                    std::chrono::milliseconds timeout);
  ~BlockingCallWatch();
  BlockingCallWatch(const BlockingCallWatch&) = delete;
  BlockingCallWatch& operator=(const BlockingCallWatch&) = delete;
};

}  // namespace keras::distribution
