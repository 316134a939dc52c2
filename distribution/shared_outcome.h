// Work that some processes do alone (process 0 opens a log or writes a backup; every process
// parses a file) but whose failure must stop all of them: otherwise the ones that succeeded
// go on into their next collective and wait there for the ones that threw, until the
// collective deadline, and then report the wrong cause.
#pragma once
#include <exception>
#include <string>

namespace keras::distribution {

// Every process of the world calls this with its own outcome (null: success). When any
// failed, each throws: its own exception where it failed, an Error naming `what` elsewhere.
// One 8-byte all-reduce; free with one process.
void agree_on_failure(std::exception_ptr failure, const std::string& what);

}  // namespace keras::distribution
