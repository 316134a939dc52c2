// Jobs started by hand (distribution/transports/rendezvous/rendezvous_job.h).
#include "distribution/transports/rendezvous/rendezvous_job.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "distribution/runtime/collective_failure.h"
#include "distribution/api/distribution.h"
#include "distribution/transports/gloo/gloo_communicator.h"
#include "distribution/transports/rendezvous/address.h"
#include "distribution/transports/rendezvous/job_monitor.h"
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

std::string own_host(const std::vector<std::string>& addresses, int process_id) {
  if (std::optional<std::string> interface = listening_interface_override()) return *interface;
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
  listening_interface_override();  // a bad KERAS_DISTRIBUTION_INTERFACE is refused before joining
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
    // While joining, replies may take until the join's deadline: hundreds of processes starting
    // at once on few cores can starve the store's thread for seconds (250 on this 2-core machine
    // left requests unanswered for over 10 s). Once joined, the heartbeat timeout applies.
    store = port_taken.empty()
                ? std::make_shared<KeyValueClient>(host, port, deadline, token, timeout)
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
  // The address list this process was given, when it was given one (not the coordinator's
  // address alone): every process must hold the same, or some would listen where no peer looks.
  // It is published before join/num_processes, the key that says this process arrived: a peer
  // that sees the arrival then sees the list too. (In the other order process 0 could take a
  // process whose list differed as arrived, publish join/complete and wait in the Gloo mesh for
  // a process that had refused the job: rendezvous_addresses_differ hung 1 run in 15 under
  // the sanitizers.)
  std::string listing;
  if (addresses.size() > 1) {
    for (const std::string& address : addresses) listing += str(listing.empty() ? "" : ",", address);
    store->set(str("join/addresses/", process_id), text(listing));
  }
  store->set(str("join/num_processes/", process_id), text(std::to_string(processes)));
  // A job error found by this process: published so the others stop waiting, then (on the
  // coordinator, whose store ends with it) a pause long enough for them to read it.
  auto refuse = [&](const std::string& message) {
    store->set("join/error", text(message));
    if (process_id == 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    throw ValueError(message);
  };
  // Whether process p has arrived; refuses the job when p was told another job than this one.
  auto arrived = [&](int p) {
    std::optional<std::vector<char>> theirs = store->try_get(str("join/num_processes/", p));
    if (!theirs) return false;
    if (std::string(theirs->begin(), theirs->end()) != std::to_string(processes)) {
      refuse(str("process ", p, " was started with num_processes=", std::string(theirs->begin(), theirs->end()),
                 " but process ", process_id, " with num_processes=", processes,
                 "; every process must be given the same"));
    }
    if (!listing.empty() && p != process_id) {
      std::optional<std::vector<char>> their_listing = store->try_get(str("join/addresses/", p));
      if (their_listing && std::string(their_listing->begin(), their_listing->end()) != listing) {
        refuse(str("process ", p, " was started with job_addresses=", std::string(their_listing->begin(), their_listing->end()),
                   " but process ", process_id, " with job_addresses=", listing,
                   "; every process must be given the same list (or only the coordinator's address)"));
      }
    }
    return true;
  };
  // Wait for every process. Process 0 checks each one's view of the job as it arrives (one
  // read each) and then publishes "join/complete"; every other process compares its view with
  // process 0's and waits for that one key. A poll thus costs each process a request or two:
  // when every process read every process's keys, 250 processes made 62,500 requests per poll
  // round and the store's replies came too late (a join failed at 250 processes).
  std::vector<int> missing;
  if (process_id == 0) {
    for (int p = 0; p < processes; ++p) missing.push_back(p);
  } else {
    missing.push_back(0);
  }
  bool complete = false;
  auto pause = std::chrono::milliseconds(1);
  // Polls back off to 50 ms, or 2 ms per process in large jobs (at most 1 s): the store then
  // answers about 500 polls a second whatever the job's size.
  const auto longest_pause = std::clamp(std::chrono::milliseconds(2 * processes), std::chrono::milliseconds(50),
                                        std::chrono::milliseconds(1000));
  while (true) {
    if (auto error = store->try_get("join/error")) {
      std::string message(error->begin(), error->end());
      if (process_id == 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
      throw ValueError(str("another process refused the job: ", message));
    }
    std::erase_if(missing, [&](int p) { return arrived(p); });
    if (missing.empty()) {
      if (process_id == 0) {
        store->set("join/complete", text("1"));
        complete = true;
      } else {
        complete = store->try_get("join/complete").has_value();
      }
    }
    if (complete || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, longest_pause);
  }
  if (!complete) {
    missing.clear();  // who is missing, read once
    for (int p = 0; p < processes; ++p) {
      if (!store->try_get(str("join/num_processes/", p))) missing.push_back(p);
    }
    std::string ids;
    for (int p : missing) ids += str(ids.empty() ? "" : ", ", p);
    // The coordinator says whom it turned away meanwhile: a process given the wrong token is
    // one of them, refused on its side, and this is where process 0 learns why it waited.
    std::string refused = coordinator ? coordinator->refusals() : "";
    throw CollectiveError(str("processes ", ids.empty() ? std::string("(none missing now)") : ids, " of ", processes,
                              " did not join the job at the coordinator ", store->address(), " within ",
                              static_cast<double>(timeout.count()) / 1000.0, " s ",
                              "(KERAS_DISTRIBUTION_INIT_TIMEOUT_SECONDS)",
                              refused.empty() ? std::string() : str("; meanwhile the coordinator ", refused)));
  }
  rendezvous_store = store;
  // The world's Gloo full mesh: processes^2 requests through the store, still under the join's
  // reply timeout.
  auto world = std::make_shared<GlooCommunicator>(store, "world", own_host(addresses, process_id), process_id,
                                                  processes, "world");
  // Connected: from now on a store that answers nothing for the heartbeat timeout is process 0
  // frozen or cut off (a healthy one answers in microseconds), and the monitor watches.
  store->set_reply_timeout(heartbeat_timeout());
  job_monitor = std::make_unique<JobMonitor>(host, port, process_id, processes, token);
  return world;
}

namespace {

// Leaving a job started by hand: every process says so in the store and waits for the others,
// so process 0 keeps the store up until the last one is done with it.
// Waits at the store until every process has left the world (or the init timeout passes).
// Sockets close only after this: a process that closed its Gloo pairs as soon as its own
// leave() returned could do so while its peer still read the leaving signature, and a socket
// closed with unread bytes in it (the peer's next receive notice) is reset by the kernel, which
// discards what the peer had not read. rendezvous_stranger_stray_byte_open failed so once in
// CI: process 1 saw "connection closed by peer" inside finalize, process 0 waited here 30 s.
void wait_until_every_process_left(int processes) {
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
  wait_until_every_process_left(world ? world->size() : 1);
  world.reset();
  rendezvous_store.reset();
  coordinator.reset();
}

}  // namespace keras::distribution
