// The process-wide record of the first collective failure (see collective_failure.h).
#include "distribution/runtime/collective_failure.h"

#include <mutex>

namespace keras::distribution {
namespace {
std::mutex failure_mutex;
std::optional<std::string> first_failure;
}  // namespace

void record_collective_failure(const std::string& message) {
  std::lock_guard lock(failure_mutex);
  if (!first_failure) first_failure = message;
}

std::optional<std::string> collective_failure() {
  std::lock_guard lock(failure_mutex);
  return first_failure;
}

}  // namespace keras::distribution
