// Heartbeats of a job's processes (distribution/transports/rendezvous/job_monitor.h).
#include "distribution/transports/rendezvous/job_monitor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "engine/environment.h"
#include "engine/errors.h"

namespace keras::distribution {
namespace {

// 100 ms for jobs of up to 25 processes: a failure reaches every process well inside the 10 s
// the fault tests allow, at two tiny requests per process per period; larger jobs beat less
// often (4 ms per process, at most 1 s), so the store serves about 500 heartbeats a second
// whatever the job's size. Process 0 reads the heartbeats every tenth period.
std::chrono::milliseconds beat_period(int processes) {
  return std::clamp(std::chrono::milliseconds(4 * processes), std::chrono::milliseconds(100),
                    std::chrono::milliseconds(1000));
}
constexpr int kCheckEvery = 10;
// Added to a process's heartbeat counter when it leaves: far above any count of beats.
constexpr std::int64_t kLeft = std::int64_t{1} << 40;

double rounded_seconds(std::chrono::steady_clock::duration duration) {
  return std::round(std::chrono::duration<double>(duration).count() * 10.0) / 10.0;
}

}  // namespace

std::chrono::milliseconds heartbeat_timeout() {
  if (auto value = environment::seconds("KERAS_DISTRIBUTION_HEARTBEAT_TIMEOUT_SECONDS", 0.3, 86400)) return *value;
  return std::chrono::seconds(10);
}

JobMonitor::JobMonitor(const std::string& host, int port, int process_id, int processes,
                       const std::optional<JobToken>& token)
    : process_id_(process_id), processes_(processes), timeout_(heartbeat_timeout()), period_(beat_period(processes)) {
  store_ = std::make_unique<KeyValueClient>(host, port, std::chrono::steady_clock::now() + std::chrono::seconds(10),
                                            token, timeout_);
  thread_ = std::thread([this] { watch(); });
}

JobMonitor::~JobMonitor() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  try {
    store_->add(str("alive/", process_id_), kLeft);
  } catch (const Error&) {
    // The coordinator is gone already: nobody is left to check.
  }
}

void JobMonitor::watch() {
  using Clock = std::chrono::steady_clock;
  std::vector<std::int64_t> seen(static_cast<std::size_t>(processes_), -1);
  std::vector<Clock::time_point> moved(static_cast<std::size_t>(processes_), Clock::now());
  for (int round = 1; !stopping_; ++round) {
    std::optional<std::vector<char>> failed;
    try {
      store_->add(str("alive/", process_id_), 1);
      failed = store_->try_get("job/failed");
      if (!failed && process_id_ == 0 && round % kCheckEvery == 0) {
        for (int p = 1; p < processes_; ++p) {
          const std::int64_t beats = store_->add(str("alive/", p), 0);
          const auto now = Clock::now();
          auto index = static_cast<std::size_t>(p);
          if (beats >= kLeft) continue;
          if (beats != seen[index]) {
            seen[index] = beats;
            moved[index] = now;
          } else if (now - moved[index] >= timeout_) {
            fail(str("process ", p, " stopped answering: its heartbeat (written every ",
                     static_cast<double>(period_.count()) / 1000.0, " s by a thread of its own) has not moved for ",
                     rounded_seconds(now - moved[index]), " s (KERAS_DISTRIBUTION_HEARTBEAT_TIMEOUT_SECONDS=",
                     rounded_seconds(timeout_), "): it is frozen, cut off from the coordinator, or its machine is gone"));
          }
        }
      }
    } catch (const Error& error) {
      if (stopping_) return;
      end(str("process 0 (the coordinator) stopped answering: ", error.what()));
    }
    if (failed) end("another process ended the job: " + std::string(failed->begin(), failed->end()));
    std::this_thread::sleep_for(period_);
  }
}

void JobMonitor::fail(const std::string& why) {
  try {
    store_->set("job/failed", std::vector<char>(why.begin(), why.end()));  // the others read it and end too
    std::this_thread::sleep_for(std::chrono::milliseconds(500));           // while this store still serves
  } catch (const Error&) {
    // Nobody left to tell.
  }
  end(why);
}

void JobMonitor::end(const std::string& why) {
  std::fprintf(stderr, "keras: process %d ends: %s\n", process_id_, why.c_str());
  std::fflush(stderr);
  std::_Exit(EXIT_FAILURE);
}

}  // namespace keras::distribution
