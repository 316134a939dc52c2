// Heartbeats for mpirun's jobs (distribution/transports/mpi/mpi_heartbeats.h).
#include "distribution/transports/mpi/mpi_heartbeats.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "distribution/runtime/communicator.h"
#include "distribution/transports/rendezvous/address.h"
#include "distribution/transports/rendezvous/job_monitor.h"
#include "distribution/transports/rendezvous/job_token.h"
#include "distribution/transports/rendezvous/store_protocol.h"
#include "distribution/transports/rendezvous/store_server.h"
#include "engine/errors.h"

namespace keras::distribution {
namespace {

std::unique_ptr<KeyValueServer> heartbeat_store;
std::unique_ptr<JobMonitor> heartbeat_monitor;

// What process 0 hands the others: "host port token", or "!" and why it could not listen.
constexpr int kMessageBytes = 1024;

std::string hex(const Challenge& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  for (unsigned char byte : bytes) {
    text += kDigits[byte >> 4];
    text += kDigits[byte & 15];
  }
  return text;
}

// Where process 0 listens: loopback when the whole job shares its machine (nothing else can
// reach it), else the interface the user names, else this machine's name.
std::string heartbeat_host(MPI_Comm world) {
  MPI_Comm same_machine = MPI_COMM_NULL;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &same_machine);
  int local = 0, everyone = 0;
  MPI_Comm_size(same_machine, &local);
  MPI_Comm_size(world, &everyone);
  MPI_Comm_free(&same_machine);
  if (local == everyone) return "127.0.0.1";
  if (std::optional<std::string> interface = listening_interface_override()) return *interface;
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace

void end_mpi_heartbeats_at_exit() {
  static const bool registered = [] {
    initialize_crypto();
    return std::atexit([] {
      heartbeat_monitor.reset();
      heartbeat_store.reset();
    }) == 0;
  }();
  if (!registered) throw Error("the heartbeats could not register their exit handler (std::atexit failed)");
}

void start_mpi_heartbeats(MPI_Comm world) {
  end_mpi_heartbeats_at_exit();  // a no-op when start_mpi_job registered it already
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  std::string host = heartbeat_host(world);
  std::array<char, kMessageBytes> message{};
  if (rank == 0) {
    std::string text;
    try {
      std::string secret = hex(random_challenge());
      heartbeat_store = std::make_unique<KeyValueServer>(host, 0, limits_for_job(size), JobToken(secret, "heartbeats"));
      text = str(host, " ", heartbeat_store->port(), " ", secret);
    } catch (const Error& error) {
      text = str("!", error.what());
    }
    text.copy(message.data(), message.size() - 1);
  }
  MPI_Bcast(message.data(), kMessageBytes, MPI_CHAR, 0, world);
  std::string text(message.data());
  if (text.rfind('!', 0) == 0) {
    throw CollectiveError(str("process 0 could not serve the job's heartbeats: ", text.substr(1),
                              " (under mpirun across machines it listens on its host name, or on "
                              "KERAS_DISTRIBUTION_INTERFACE when set)"));
  }
  std::size_t first = text.find(' '), second = text.find(' ', first + 1);
  std::string store_host = text.substr(0, first);
  int port = std::stoi(text.substr(first + 1, second - first - 1));
  try {
    heartbeat_monitor = std::make_unique<JobMonitor>(store_host, port, rank, size,
                                                     JobToken(text.substr(second + 1), "heartbeats"));
  } catch (const Error& error) {
    // The store client's own words name an address, not what it is for: say so, and which
    // setting picks the address process 0 listens on.
    throw CollectiveError(str("process ", rank, " could not reach the heartbeat store that process 0 serves ",
                              "for this mpirun job at ", store_host, ":", port, " (", error.what(),
                              "). Across machines process 0 listens on its host name, or on the interface ",
                              "KERAS_DISTRIBUTION_INTERFACE names: set it to one every machine can reach"));
  }
}

void stop_mpi_heartbeat_monitor() { heartbeat_monitor.reset(); }

void stop_mpi_heartbeat_store() { heartbeat_store.reset(); }

}  // namespace keras::distribution
