// Work that some processes do alone (process 0 opens a log or writes a backup; every process
// parses a file) but whose failure must stop all of them: otherwise the ones that succeeded
// go on into their next collective and wait there for the ones that threw, until the
// collective deadline, and then report the wrong cause.
#pragma once
#include <exception>
#include <string>

namespace keras::distribution {

// Whether the processes train together: there is more than one. fit() runs on every process of
// the job, with or without a distribution (it checks its arguments across them first), so its
// callbacks can agree across the world.
bool processes_train_together();

// When processes_train_together(), every process calls this with its own outcome (null:
// success); when any failed, each throws: its own exception where it failed, an Error naming
// `what` elsewhere. One 8-byte all-reduce. Otherwise it rethrows this process's failure.
void agree_on_failure(std::exception_ptr failure, const std::string& what);

}  // namespace keras::distribution
