// The watchdog thread behind BlockingCallWatch (see blocking_watchdog.h).
#include "distribution/mpi/blocking_watchdog.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>


namespace keras::distribution {
namespace {

using Clock = std::chrono::steady_clock;

// 0 = no blocking call in progress; else its deadline in steady-clock nanoseconds.
std::atomic<std::int64_t> deadline_nanoseconds{0};
std::atomic<const char*> current_operation{nullptr};
std::atomic<const std::string*> current_group{nullptr};
std::atomic<std::int64_t> current_timeout_milliseconds{0};

std::int64_t now_nanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void end_process() {
  const char* operation = current_operation.load();
  const std::string* group = current_group.load();
  std::fprintf(stderr,
               "keras: %s over %s has blocked for more than %.1f s after every rank agreed to it: a peer "
               "stopped inside it (an earlier collective of that peer failed, or it was "
               "suspended). A blocking MPI collective cannot be cancelled, so this process ends "
               "now with status 1 and mpirun ends the job.\n",
               operation != nullptr ? operation : "an MPI collective",
               group != nullptr ? group->c_str() : "its group",
               static_cast<double>(current_timeout_milliseconds.load()) / 1000.0);
  std::fflush(stderr);
  std::_Exit(EXIT_FAILURE);
}

void watch_forever() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    std::int64_t deadline = deadline_nanoseconds.load(std::memory_order_relaxed);
    if (deadline != 0 && now_nanoseconds() > deadline) end_process();
  }
}

void start_watchdog_once() {
  static std::once_flag started;
  // Detached: it only reads atomics and never touches MPI, so it may outlive main's statics.
  std::call_once(started, [] { std::thread(watch_forever).detach(); });
}

}  // namespace

BlockingCallWatch::BlockingCallWatch(const char* operation, const std::string* group,
                                     std::chrono::milliseconds timeout) {
  start_watchdog_once();
  current_operation.store(operation, std::memory_order_relaxed);
  current_group.store(group, std::memory_order_relaxed);
  current_timeout_milliseconds.store(timeout.count(), std::memory_order_relaxed);
  deadline_nanoseconds.store(
      now_nanoseconds() + std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count(),
      std::memory_order_relaxed);
}

BlockingCallWatch::~BlockingCallWatch() {
  deadline_nanoseconds.store(0, std::memory_order_relaxed);
}

}  // namespace keras::distribution
