// Jobs started by hand (distribution/transports/rendezvous/rendezvous_job.h).
#include "distribution/transports/rendezvous/rendezvous_job.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "distribution/runtime/collective_failure.h"
#include "distribution/api/distribution.h"
#include "distribution/transports/gloo/gloo_communicator.h"
#include "distribution/transports/rendezvous/address.h"
#include "distribution/transports/rendezvous/job_token.h"
#include "distribution/transports/rendezvous/store_client.h"
#include "distribution/transports/rendezvous/store_server.h"
#include "engine/environment.h"

namespace keras::distribution {
namespace {

// The rendezvous of a job started by hand (distribution/transports/rendezvous/): process 0 serves the
// store, everyone joins and checks the job, then the world is a Gloo group.
std::unique_ptr<KeyValueServer> coordinator;
std::shared_ptr<KeyValueClient> rendezvous_store;

// KERAS_DISTRIBUTION_HEARTBEAT_TIMEOUT_SECONDS (default 10): how long a process may stay silent
// before the job declares it dead. JAX's coordination service waits 100 s, PyTorch's NCCL
// watchdog 10 minutes; a step that computes for longer is not silence (heartbeats come from a
// thread of their own).
std::chrono::milliseconds heartbeat_timeout() {
  if (auto value = environment::seconds("KERAS_DISTRIBUTION_HEARTBEAT_TIMEOUT_SECONDS", 0.3, 86400)) return *value;
  return std::chrono::seconds(10);
}

// Watches the job from a thread of its own (with its own connection to the store), playing
// MPI_Abort's part for jobs started by hand, so that this process ends within seconds even if it
// is busy computing or asleep rather than inside a collective (where Gloo notices closed
// connections itself, but not a silent peer):
// - every process writes a heartbeat ("alive/<id>", a counter) every period, and reads
//   "job/failed", where a process that failed says why;
// - process 0 (whose store this is) checks everyone's heartbeat every second: one that has not
//   moved for the heartbeat timeout is a frozen process, a cut link or a machine gone, and the
//   job fails naming it;
// - the other processes notice process 0 itself by its store: a request unanswered for the
//   heartbeat timeout (process 0 frozen, or this process cut off) or a closed connection.
class JobMonitor {
 public:
  JobMonitor(const std::string& host, int port, int process_id, int processes, const std::optional<JobToken>& token)
      : process_id_(process_id), processes_(processes), timeout_(heartbeat_timeout()) {
    store_ = std::make_unique<KeyValueClient>(host, port, std::chrono::steady_clock::now() + std::chrono::seconds(10),
                                              token, timeout_);
    thread_ = std::thread([this] { watch(); });
  }
  ~JobMonitor() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
    try {
      store_->add(str("alive/", process_id_), kLeft);  // left the job: its silence from now on is not a fault
    } catch (const Error&) {
      // The coordinator is gone already: nobody is left to check.
    }
  }

 private:
  // 100 ms: a failure reaches every process well inside the 10 s the fault tests allow, at
  // two tiny requests per process per period; process 0 reads the heartbeats once a second.
  static constexpr std::chrono::milliseconds kPeriod{100};
  static constexpr int kCheckEvery = 10;
  static constexpr std::int64_t kLeft = std::int64_t{1} << 40;
  void watch() {
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
            if (beats >= kLeft) continue;
            if (beats != seen[static_cast<std::size_t>(p)]) {
              seen[static_cast<std::size_t>(p)] = beats;
              moved[static_cast<std::size_t>(p)] = now;
            } else if (now - moved[static_cast<std::size_t>(p)] >= timeout_) {
              fail(str("process ", p, " stopped answering: its heartbeat (written every ",
                       static_cast<double>(kPeriod.count()) / 1000.0, " s by a thread of its own) has not moved for ",
                       seconds(now - moved[static_cast<std::size_t>(p)]), " s (KERAS_DISTRIBUTION_HEARTBEAT_TIMEOUT_SECONDS=",
                       seconds(timeout_), "): it is frozen, cut off from the coordinator, or its machine is gone"));
            }
          }
        }
      } catch (const Error& error) {
        if (stopping_) return;
        end(str("process 0 (the coordinator) stopped answering: ", error.what()));
      }
      if (failed) end("another process ended the job: " + std::string(failed->begin(), failed->end()));
      std::this_thread::sleep_for(kPeriod);
    }
  }
  static double seconds(std::chrono::steady_clock::duration duration) {
    return std::round(std::chrono::duration<double>(duration).count() * 10.0) / 10.0;
  }
  [[noreturn]] void fail(const std::string& why) {
    try {
      store_->set("job/failed", std::vector<char>(why.begin(), why.end()));  // the others read it and end too
      std::this_thread::sleep_for(std::chrono::milliseconds(500));           // while this store still serves
    } catch (const Error&) {
      // Nobody left to tell.
    }
    end(why);
  }
  [[noreturn]] void end(const std::string& why) {
    std::fprintf(stderr, "keras: process %d ends: %s\n", process_id_, why.c_str());
    std::fflush(stderr);
    std::_Exit(EXIT_FAILURE);
  }
  int process_id_;
  int processes_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<KeyValueClient> store_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};
std::unique_ptr<JobMonitor> job_monitor;

// Ends the rendezvous's threads (the store's server, the monitor) while libcrypto still
// stands. A process that returns from main or calls exit() without finalize() (after an error,
// say) otherwise ran these statics' destructors after OpenSSL's own exit handler had freed its
// locks, and the store's thread, drawing a challenge for a new connection, crashed (SIGSEGV in
// RAND_bytes; seen in CI as process 0 of rendezvous_stranger_idle_connections_open killed by
// signal 11, its error message lost). Registered after initialize_crypto(), so it runs first.
void end_rendezvous_at_exit() {
  job_monitor.reset();
  rendezvous_store.reset();
  coordinator.reset();
}

std::chrono::milliseconds init_timeout() {
  if (auto value = environment::seconds("KERAS_DISTRIBUTION_INIT_TIMEOUT_SECONDS", 0.001, 1e6)) return *value;
  return std::chrono::seconds(120);
}

// KERAS_DISTRIBUTION_INTERFACE, checked: the host name or address this process listens on.
std::optional<std::string> interface_override() {
  std::optional<std::string> interface = environment::get("KERAS_DISTRIBUTION_INTERFACE");
  if (interface && (interface->empty() || interface->find_first_of(" ,:/") != std::string::npos)) {
    throw ValueError(str("KERAS_DISTRIBUTION_INTERFACE=", quote_input(*interface), " is not a host name or "
                         "IPv4 address of this machine (the address this process listens on)"));
  }
  return interface;
}

std::string own_host(const std::vector<std::string>& addresses, int process_id) {
  if (std::optional<std::string> interface = interface_override()) return *interface;
  if (addresses.size() > 1) return split_host_port(addresses[static_cast<std::size_t>(process_id)]).first;
  // The coordinator's address alone: a job on one machine (loopback coordinator) listens on
  // loopback; otherwise on this machine's name, which its peers resolve.
  std::pair<std::string, int> coordinator_address = split_host_port(addresses[0]);
  const std::string& host = coordinator_address.first;
  if (host.rfind("127.", 0) == 0 || host.compare("localhost") == 0) return host;
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace

std::shared_ptr<Communicator> join_job_by_rendezvous(const std::vector<std::string>& addresses,
                                                     int processes, int process_id,
                                                     const std::optional<JobToken>& token) {
  interface_override();  // a bad KERAS_DISTRIBUTION_INTERFACE is refused before joining
  auto [host, port] = split_host_port(addresses[0]);
  std::chrono::milliseconds timeout = init_timeout();
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string port_taken;
  static const bool ends_at_exit = [] {
    initialize_crypto();
    return std::atexit(end_rendezvous_at_exit) == 0;
  }();
  if (!ends_at_exit) throw Error("the rendezvous could not register its exit handler (std::atexit failed)");
  if (process_id == 0) {
    try {
      coordinator = std::make_unique<KeyValueServer>(host, port, limits_for_job(processes), token);
    } catch (const Error& error) {
      // Taken: by a foreign program (an error), or by this job's coordinator, which means a
      // second process was given id 0; the claim below finds that out and tells both.
      port_taken = error.what();
    }
  }
  std::shared_ptr<KeyValueClient> store;
  try {
    store = port_taken.empty()
                ? std::make_shared<KeyValueClient>(host, port, deadline, token)
                : std::make_shared<KeyValueClient>(host, port, std::chrono::steady_clock::now() + std::chrono::seconds(1),
                                                   token, std::chrono::seconds(2));
    if (!port_taken.empty()) store->try_get("join/error");  // does a keras coordinator answer?
  } catch (const CollectiveError&) {
    if (!port_taken.empty()) throw Error(port_taken);
    throw;
  }
  auto text = [](const std::string& value) { return std::vector<char>(value.begin(), value.end()); };
  // A process that found this port held by a keras coordinator while holding id 0 itself is a
  // second id 0 whichever of the two claims first.
  if (store->add(str("join/claimed/", process_id), 1) > 1 || !port_taken.empty()) {
    std::string message = str("process_id ", process_id, " was claimed by two processes of the job at ",
                              store->address(), "; each process needs its own id in [0, ", processes, ")");
    store->set("join/error", text(message));
    throw ValueError(message);
  }
  store->set(str("join/num_processes/", process_id), text(std::to_string(processes)));
  // The address list this process was given, when it was given one (not the coordinator's
  // address alone): every process must hold the same, or some would listen where no peer looks.
  std::string listing;
  if (addresses.size() > 1) {
    for (const std::string& address : addresses) listing += str(listing.empty() ? "" : ",", address);
    store->set(str("join/addresses/", process_id), text(listing));
  }
  // A job error found by this process: published so the others stop waiting, then (on the
  // coordinator, whose store ends with it) a pause long enough for them to read it.
  auto refuse = [&](const std::string& message) {
    store->set("join/error", text(message));
    if (process_id == 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    throw ValueError(message);
  };
  // Wait for every process, checking each one's view of the job as it arrives.
  std::vector<int> missing;
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    if (auto error = store->try_get("join/error")) {
      std::string message(error->begin(), error->end());
      if (process_id == 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
      throw ValueError(str("another process refused the job: ", message));
    }
    missing.clear();
    for (int p = 0; p < processes; ++p) {
      std::optional<std::vector<char>> theirs = store->try_get(str("join/num_processes/", p));
      if (!theirs) {
        missing.push_back(p);
      } else if (std::string(theirs->begin(), theirs->end()) != std::to_string(processes)) {
        refuse(str("process ", p, " was started with num_processes=", std::string(theirs->begin(), theirs->end()),
                   " but process ", process_id, " with num_processes=", processes,
                   "; every process must be given the same"));
      } else if (!listing.empty() && p != process_id) {
        std::optional<std::vector<char>> their_listing = store->try_get(str("join/addresses/", p));
        if (their_listing && std::string(their_listing->begin(), their_listing->end()) != listing) {
          refuse(str("process ", p, " was started with job_addresses=", std::string(their_listing->begin(), their_listing->end()),
                     " but process ", process_id, " with job_addresses=", listing,
                     "; every process must be given the same list (or only the coordinator's address)"));
        }
      }
    }
    if (missing.empty() || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  if (!missing.empty()) {
    std::string ids;
    for (int p : missing) ids += str(ids.empty() ? "" : ", ", p);
    // The coordinator says whom it turned away meanwhile: a process given the wrong token is
    // one of them, refused on its side, and this is where process 0 learns why it waited.
    std::string refused = coordinator ? coordinator->refusals() : "";
    throw CollectiveError(str("processes ", ids, " of ", processes, " did not join the job at the coordinator ",
                              store->address(), " within ", static_cast<double>(timeout.count()) / 1000.0, " s ",
                              "(KERAS_DISTRIBUTION_INIT_TIMEOUT_SECONDS)",
                              refused.empty() ? std::string() : str("; meanwhile the coordinator ", refused)));
  }
  rendezvous_store = store;
  job_monitor = std::make_unique<JobMonitor>(host, port, process_id, processes, token);
  auto world = std::make_shared<GlooCommunicator>(store, "world", own_host(addresses, process_id), process_id,
                                                  processes, "world");
  return world;
}

namespace {

// Leaving a job started by hand: every process says so in the store and waits for the others,
// so process 0 keeps the store up until the last one is done with it.
void leave_store(int processes) {
  if (!rendezvous_store) return;
  job_monitor.reset();  // the store may close once everyone has left
  try {
    rendezvous_store->add("leave", 1);
    auto deadline = std::chrono::steady_clock::now() + init_timeout();
    while (rendezvous_store->add("leave", 0) < processes && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  } catch (const Error&) {
    // The coordinator is gone: nobody is left to wait for.
  }
  rendezvous_store.reset();
  coordinator.reset();
}

}  // namespace

bool joined_by_rendezvous() { return rendezvous_store != nullptr; }

void leave_job_by_rendezvous(std::shared_ptr<Communicator>& world) {
  if (auto failure = collective_failure()) {
    // Peers inside a collective see this process's connections close; the others learn it
    // from the store (JobMonitor).
    int rank = world ? world->rank() : -1;
    try {
      rendezvous_store->set("job/failed", [&] {
        std::string text = str("process ", rank, ": ", *failure);
        return std::vector<char>(text.begin(), text.end());
      }());
    } catch (const Error&) {
      // The coordinator is gone already; the peers notice that themselves.
    }
    std::fprintf(stderr, "keras: process %d ends after a failed collective: %s\n", rank, failure->c_str());
    std::fflush(stderr);
    std::_Exit(EXIT_FAILURE);
  }
  // Leaving is a collective, as under MPI: a peer still inside a collective learns at once
  // that this process has gone.
  try {
    if (world) world->leave();
  } catch (const CollectiveError& error) {
    std::fprintf(stderr, "keras: process %d ends: %s\n", world->rank(), error.what());
    std::fflush(stderr);
    std::_Exit(EXIT_FAILURE);
  }
  clear_mesh_axis_groups();
  int processes = world ? world->size() : 1;
  world.reset();
  leave_store(processes);
}

}  // namespace keras::distribution
