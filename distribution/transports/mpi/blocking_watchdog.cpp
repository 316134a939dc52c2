// The watchdog thread behind BlockingCallWatch (see blocking_watchdog.h).
#include "distribution/transports/mpi/blocking_watchdog.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <time.h>


namespace keras::distribution {
namespace {


// The call being watched. The calling thread writes the description, then publishes the
// deadline with release order; the watchdog reads the deadline with acquire order, copies the
// description, and reads the deadline again: only if it is unchanged was the copy taken while
// the call was still blocked (the calling thread writes nothing while blocked).
std::atomic<std::int64_t> deadline_nanoseconds{0};  // 0: no blocking call in progress
std::atomic<const char*> current_operation{nullptr};
char current_group[128] = {};
std::atomic<std::int64_t> current_limit_milliseconds{0};

// The coarse monotonic clock (a few ms of resolution, against limits of 10 s and more): 6.6 ns
// a read here against 25.6 for steady_clock, read once per collective on the calling thread
// (a 1 KiB all-reduce takes about 0.9 us).
std::int64_t now_nanoseconds() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

[[noreturn]] void end_process(const char* operation, const char* group, std::int64_t limit) {
  std::fprintf(stderr,
               "keras: %s over %s has blocked for more than %.1f s after every rank agreed to it: a "
               "peer stopped inside it (an earlier collective of that peer failed, or it was "
               "suspended). A blocking MPI collective cannot be cancelled, so this process ends "
               "now with status 1 and mpirun ends the job.\n",
               operation != nullptr ? operation : "an MPI collective", group,
               static_cast<double>(limit) / 1000.0);
  std::fflush(stderr);
  std::_Exit(EXIT_FAILURE);
}

void watch_forever() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    std::int64_t deadline = deadline_nanoseconds.load(std::memory_order_acquire);
    if (deadline == 0 || now_nanoseconds() <= deadline) continue;
    char group[sizeof current_group];
    std::memcpy(group, current_group, sizeof group);
    group[sizeof group - 1] = '\0';
    const char* operation = current_operation.load(std::memory_order_relaxed);
    std::int64_t limit = current_limit_milliseconds.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (deadline_nanoseconds.load(std::memory_order_relaxed) != deadline) continue;  // it returned
    end_process(operation, group, limit);
  }
}

void start_watchdog_once() {
  static std::once_flag started;
  // Detached: it only reads these globals and never touches MPI, so it may outlive main.
  std::call_once(started, [] { std::thread(watch_forever).detach(); });
}

}  // namespace

std::chrono::milliseconds blocking_call_limit(std::chrono::milliseconds collective_timeout) {
  return collective_timeout + std::max(collective_timeout, std::chrono::milliseconds(10'000));
}

BlockingCallWatch::BlockingCallWatch(const char* operation, const std::string* group,
                                     std::chrono::milliseconds timeout) {
  start_watchdog_once();
  std::chrono::milliseconds limit = blocking_call_limit(timeout);
  current_operation.store(operation, std::memory_order_relaxed);
  std::size_t length = std::min(group->size(), sizeof current_group - 1);
  std::memcpy(current_group, group->data(), length);
  current_group[length] = '\0';
  current_limit_milliseconds.store(limit.count(), std::memory_order_relaxed);
  deadline_nanoseconds.store(
      now_nanoseconds() + std::chrono::duration_cast<std::chrono::nanoseconds>(limit).count(),
      std::memory_order_release);
}

BlockingCallWatch::~BlockingCallWatch() {
  deadline_nanoseconds.store(0, std::memory_order_release);
}

}  // namespace keras::distribution
