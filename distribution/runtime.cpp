// initialize(), devices, the world communicator.
#include "distribution/runtime.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <thread>

#include <unistd.h>

#include "distribution/collective_failure.h"
#include "distribution/distribution.h"
#include "distribution/gloo/gloo_communicator.h"
#include "distribution/rendezvous/address.h"
#include "distribution/rendezvous/job_token.h"
#include "distribution/rendezvous/store_client.h"
#include "distribution/rendezvous/store_server.h"
#include "distribution/mpi/mpi_communicator.h"
#include "engine/environment.h"
#include "engine/gpu_runtime.h"
#include "distribution/local_gpu.h"
#if defined(KERAS_HAS_NCCL)
#include "distribution/nccl/nccl_communicator.h"
#endif
#include "engine/random.h"

namespace keras::distribution {
namespace {

std::mutex state_mutex;
bool initialized = false;
std::optional<int> chosen_gpu;
std::string no_gpu_reason = "distribution::initialize() has not run";
std::shared_ptr<Communicator> gpu_world_communicator;
std::atomic<bool> distribution_created{false};
std::shared_ptr<Communicator> world_communicator;

// The most processes a job may name; far beyond any machine here, small enough that no count
// derived from it overflows.
constexpr std::int64_t kMaximumProcesses = 1 << 20;

bool launched_by_mpirun() {
  return environment::get("OMPI_COMM_WORLD_SIZE") || environment::get("PMI_SIZE") ||
         environment::get("PMIX_RANK");
}

void finalize_at_exit() { finalize(); }

// Ends every process of the job, saying why. Used when finalizing normally could hang: this
// process's collectives failed (peers may be inside one forever), or it is leaving while peers
// still issue collectives.
[[noreturn]] void abort_job(const std::string& why) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "keras: process %d ends the whole job (MPI_Abort): %s\n", rank,
               why.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(EXIT_FAILURE);  // MPI_Abort does not return; this is for the compiler
}

// The rendezvous of a job started by hand (distribution/rendezvous/): process 0 serves the
// store, everyone joins and checks the job, then the world is a Gloo group.
std::unique_ptr<KeyValueServer> coordinator;
std::shared_ptr<KeyValueClient> rendezvous_store;

// Watches the job from a thread of its own (with its own connection to the store): when another
// process ends after a failed collective it says so under "job/failed", and when process 0 dies
// the store goes with it. Either way this process ends within a poll period, even if it is
// busy computing or asleep rather than inside a collective, where Gloo itself would notice the
// closed connections. It plays MPI_Abort's part for jobs started by hand.
class JobMonitor {
 public:
  JobMonitor(const std::string& host, int port, int process_id, const std::optional<JobToken>& token)
      : process_id_(process_id) {
    store_ = std::make_unique<KeyValueClient>(host, port, std::chrono::steady_clock::now() + std::chrono::seconds(10),
                                              token);
    thread_ = std::thread([this] { watch(); });
  }
  ~JobMonitor() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  // 100 ms: a failure reaches every process well inside the 10 s the fault tests allow, at
  // one tiny request per process per period.
  static constexpr std::chrono::milliseconds kPeriod{100};
  void watch() {
    while (!stopping_) {
      std::optional<std::vector<char>> failed;
      try {
        failed = store_->try_get("job/failed");
      } catch (const Error&) {
        if (stopping_) return;
        end("the coordinator (process 0) is gone: its store at " + store_->address() + " closed");
      }
      if (failed) end("another process ended after a failed collective: " + std::string(failed->begin(), failed->end()));
      std::this_thread::sleep_for(kPeriod);
    }
  }
  [[noreturn]] void end(const std::string& why) {
    std::fprintf(stderr, "keras: process %d ends: %s\n", process_id_, why.c_str());
    std::fflush(stderr);
    std::_Exit(EXIT_FAILURE);
  }
  int process_id_;
  std::unique_ptr<KeyValueClient> store_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};
std::unique_ptr<JobMonitor> job_monitor;

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

std::shared_ptr<Communicator> join_by_rendezvous(const std::vector<std::string>& addresses,
                                                 int processes, int process_id,
                                                 const std::optional<JobToken>& token) {
  interface_override();  // a bad KERAS_DISTRIBUTION_INTERFACE is refused before joining
  auto [host, port] = split_host_port(addresses[0]);
  std::chrono::milliseconds timeout = init_timeout();
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string port_taken;
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
      }
    }
    if (missing.empty() || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  if (!missing.empty()) {
    std::string ids;
    for (int p : missing) ids += str(ids.empty() ? "" : ", ", p);
    throw CollectiveError(str("processes ", ids, " of ", processes, " did not join the job at the coordinator ",
                              store->address(), " within ", static_cast<double>(timeout.count()) / 1000.0, " s ",
                              "(KERAS_DISTRIBUTION_INIT_TIMEOUT_SECONDS)"));
  }
  rendezvous_store = store;
  job_monitor = std::make_unique<JobMonitor>(host, port, process_id, token);
  auto world = std::make_shared<GlooCommunicator>(store, "world", own_host(addresses, process_id), process_id,
                                                  processes, "world");
  return world;
}

// Leaving a job started by hand: every process says so in the store and waits for the others,
// so process 0 keeps the store up until the last one is done with it.
void leave_rendezvous() {
  if (!rendezvous_store) return;
  job_monitor.reset();  // the store may close once everyone has left
  int processes = world_communicator ? world_communicator->size() : 1;
  try {
    rendezvous_store->add("leave", 1);
    auto deadline = std::chrono::steady_clock::now() + init_timeout();
    while (rendezvous_store->add("leave", 0) < processes && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  } catch (const Error&) {
    // The coordinator is gone: nobody is left to wait for.
  }
  world_communicator.reset();
  rendezvous_store.reset();
  coordinator.reset();
}

}  // namespace

std::vector<std::string> parse_job_addresses(const std::string& addresses,
                                             std::optional<int> num_processes) {
  std::vector<std::string> result;
  std::size_t begin = 0;
  while (begin <= addresses.size()) {
    std::size_t comma = addresses.find(',', begin);
    std::string address = addresses.substr(begin, comma == std::string::npos ? std::string::npos
                                                                             : comma - begin);
    std::size_t colon = address.rfind(':');
    bool valid = colon != std::string::npos && colon > 0 && colon + 1 < address.size();
    if (valid) {
      int port = 0;
      std::string port_text = address.substr(colon + 1);
      auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
      valid = error == std::errc() && end == port_text.data() + port_text.size() && port > 0 &&
              port < 65536;
    }
    if (!valid) {
      throw ValueError(str("job address ", quote_input(address), " in ", quote_input(addresses),
                         " is not of the form host:port (port in 1-65535)"));
    }
    result.push_back(address);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  // One address is the coordinator's alone (Keras counts addresses only in a comma list); a
  // list names every process.
  if (num_processes && result.size() > 1 && static_cast<int>(result.size()) != *num_processes) {
    throw ValueError(str("job_addresses ", quote_input(addresses), " lists ", result.size(),
                         " processes, but num_processes is ", *num_processes));
  }
  return result;
}

namespace {
// Each process takes the GPU of its local rank; with several processes and NCCL, the GPUs
// form the NCCL world. Where some host has fewer GPUs than processes, no process takes a GPU
// (so the NCCL world is all or nothing) and the job runs on CPUs as before; asking for the
// GPU then says why (require_local_gpu).
void choose_gpu() {
  if (gpu::device_count() == 0) {
    no_gpu_reason = str("this machine has no GPU (", gpu::description(), ")");
    return;
  }
  HostPlace place = place_on_host(*world_communicator);
  int chosen = -1;
  try {
    chosen = choose_local_gpu(place, gpu::device_count());
  } catch (const ValueError& error) {
    no_gpu_reason = error.what();
  }
  // Every process learns whether any host lacks GPUs (world() would take the lock
  // initialize() holds).
  std::int64_t failed = chosen < 0 ? 1 : 0;
  world_communicator->all_reduce(&failed, 1, DType::int64, ReduceOperation::max);
  if (failed != 0) {
    if (chosen >= 0) {
      no_gpu_reason = "another host of this job runs more processes than it has GPUs (its "
                      "processes say how many); each process uses one GPU";
    }
    return;
  }
  chosen_gpu = chosen;
#if defined(KERAS_HAS_NCCL)
  if (world_communicator->size() > 1) {
    gpu_world_communicator = std::make_shared<NcclCommunicator>(world_communicator, chosen, "world");
    world_communicator->set_device_twin(gpu_world_communicator);
  }
#endif
}
}  // namespace

void initialize(std::optional<std::string> job_addresses, std::optional<int> num_processes_arg,
                std::optional<int> process_id_arg, std::optional<std::string> job_token) {
  std::lock_guard lock(state_mutex);
  if (initialized) {
    throw ValueError("distribution::initialize() was already called; call it once per process");
  }
  if (distribution_created) {
    throw ValueError("distribution::initialize() must run before any Distribution is created; "
                     "call it at the start of main()");
  }
  if (!job_addresses) job_addresses = environment::get("KERAS_DISTRIBUTION_JOB_ADDRESSES");
  if (!num_processes_arg) {
    if (auto value = environment::integer("KERAS_DISTRIBUTION_NUM_PROCESSES", 1, kMaximumProcesses)) {
      num_processes_arg = static_cast<int>(*value);
    }
  }
  if (!process_id_arg) {
    if (auto value = environment::integer("KERAS_DISTRIBUTION_PROCESS_ID", 0, kMaximumProcesses - 1)) {
      process_id_arg = static_cast<int>(*value);
    }
  }
  if (num_processes_arg && *num_processes_arg < 1) {
    throw ValueError(str("num_processes must be >= 1, got ", *num_processes_arg));
  }
  if (process_id_arg && (*process_id_arg < 0 ||
                         (num_processes_arg && *process_id_arg >= *num_processes_arg))) {
    throw ValueError(str("process_id ", *process_id_arg, " is out of range; expected [0, ",
                         num_processes_arg ? *num_processes_arg : 0, ")"));
  }
  std::vector<std::string> addresses;
  if (job_addresses) addresses = parse_job_addresses(*job_addresses, num_processes_arg);
  // The job token: checked here (set but empty is an error) even where it is not used.
  std::optional<JobToken> token;
  if (job_token) {
    token.emplace(*job_token, "job_token");
  } else if (const char* variable = std::getenv("KERAS_DISTRIBUTION_JOB_TOKEN")) {
    // Read raw, not through environment::get (which takes empty for unset): a token variable
    // set from an empty shell variable must not quietly open the job to anyone.
    token.emplace(variable, "KERAS_DISTRIBUTION_JOB_TOKEN");
  }

  if (launched_by_mpirun()) {
    int already = 0;
    MPI_Initialized(&already);
    if (!already) {
      int provided = 0;
      // Only the main thread calls MPI (our pool's workers never do).
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      std::atexit(finalize_at_exit);
      // OpenMPI allocates and frees temporary buffers inside large collectives. With glibc's
      // defaults those come from mmap and go back to the kernel on free, so every call faults
      // its pages in again (about 14 us per 4 KiB page here): a 7.45 MB all-reduce took 4.1 ms
      // instead of 1.2 ms, and 64 MiB fell to about a third of the 16 MiB bandwidth. Serve every
      // block from the heap (no mmap at all) and never trim it.
      mallopt(M_MMAP_MAX, 0);
      mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
    }
    auto communicator = std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, "world", false);
    if (num_processes_arg && *num_processes_arg != communicator->size()) {
      throw ValueError(str("num_processes=", *num_processes_arg, " disagrees with mpirun, which ",
                           "started ", communicator->size(), " processes"));
    }
    if (process_id_arg && *process_id_arg != communicator->rank()) {
      throw ValueError(str("process_id=", *process_id_arg, " disagrees with this process's MPI ",
                           "rank ", communicator->rank()));
    }
    world_communicator = communicator;
  } else {
    // Started by hand: the job is what the arguments say, checked as JAX's initialize does
    // (Keras itself accepts some of these and runs a different job than was asked for).
    if (addresses.size() > 1 && !num_processes_arg) {
      throw ValueError(str("job_addresses lists ", addresses.size(), " processes but num_processes is "
                           "not given; pass num_processes=", addresses.size(), " (or set "
                           "KERAS_DISTRIBUTION_NUM_PROCESSES) and this process's process_id"));
    }
    if (process_id_arg && !num_processes_arg) {
      throw ValueError(str("process_id=", *process_id_arg, " is given without num_processes; a job "
                           "started by hand needs job_addresses, num_processes and process_id"));
    }
    if (num_processes_arg && *num_processes_arg > 1) {
      if (addresses.empty()) {
        throw ValueError(str("num_processes=", *num_processes_arg, " without job_addresses: processes "
                             "started by hand meet at the coordinator, process 0's host:port (or "
                             "launch the program with `mpirun -np ", *num_processes_arg, " <program>`)"));
      }
      if (!process_id_arg) {
        throw ValueError(str("num_processes=", *num_processes_arg, " without process_id: each process "
                             "started by hand must say which one it is (0 to ", *num_processes_arg - 1, ")"));
      }
      world_communicator = join_by_rendezvous(addresses, *num_processes_arg, *process_id_arg, token);
      std::atexit(finalize_at_exit);
    } else {
      world_communicator = std::make_shared<LocalCommunicator>("world");
    }
  }
  // Every process starts from rank 0's seed, so replicated variables are initialised equal.
  std::uint64_t seed = next_random_seed();
  world_communicator->broadcast(&seed, 1, DType::int64, 0);
  set_random_seed(seed);
  choose_gpu();
  initialized = true;
}

bool is_initialized() {
  std::lock_guard lock(state_mutex);
  return initialized;
}

void finalize() {
  std::lock_guard lock(state_mutex);
  // NCCL first: its communicators bootstrap over the world, which goes below. The mesh-axis
  // groups hold the NCCL splits.
  clear_mesh_axis_groups();
  gpu_world_communicator.reset();
  if (rendezvous_store) {
    if (auto failure = collective_failure()) {
      // Peers inside a collective see this process's connections close; the others learn it
      // from the store (JobMonitor).
      int rank = world_communicator ? world_communicator->rank() : -1;
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
      if (world_communicator) world_communicator->leave();
    } catch (const CollectiveError& error) {
      std::fprintf(stderr, "keras: process %d ends: %s\n", world_communicator->rank(), error.what());
      std::fflush(stderr);
      std::_Exit(EXIT_FAILURE);
    }
    clear_mesh_axis_groups();
    leave_rendezvous();
    return;
  }
  int started = 0, finished = 0;
  MPI_Initialized(&started);
  MPI_Finalized(&finished);
  if (!started || finished) {
    world_communicator.reset();
    return;
  }
  if (auto failure = collective_failure()) {
    abort_job(str("a collective of this process failed, so other processes may be waiting "
                  "inside it: ", *failure));
  }
  // Leaving is a collective too: a peer still issuing collectives learns at once that this
  // process has gone, instead of waiting out its timeout, and MPI_Finalize (which waits for
  // every process) is reached only when all of them leave.
  try {
    if (world_communicator) world_communicator->leave();
  } catch (const CollectiveError& error) {
    abort_job(error.what());
  }
  clear_mesh_axis_groups();
  world_communicator.reset();
  MPI_Finalize();
}

std::shared_ptr<Communicator> world_pointer() {
  std::lock_guard lock(state_mutex);
  if (!world_communicator) world_communicator = std::make_shared<LocalCommunicator>("world");
  return world_communicator;
}

Communicator& world() { return *world_pointer(); }
int num_processes() { return world().size(); }
int process_id() { return world().rank(); }

std::vector<std::string> list_devices(std::optional<std::string> device_type) {
  std::string type;
  // Keras: an empty device_type (like None) means the default type.
  if (device_type && device_type->empty()) device_type.reset();
  if (device_type) {
    for (char c : *device_type) type += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (type != "cpu" && type != "gpu") {
      throw ValueError(str("unknown device type '", *device_type, "'; expected 'cpu' or 'gpu'"));
    }
  } else {
    type = gpu::device_count() > 0 ? "gpu" : "cpu";
  }
  if (type == "gpu" && gpu::device_count() == 0) {
    throw ValueError("list_devices('gpu'): this machine (or this build) has no GPU");
  }
  std::vector<std::string> devices;
  for (int i = 0; i < num_processes(); ++i) devices.push_back(type + ":" + std::to_string(i));
  return devices;
}

int get_device_count(std::optional<std::string> device_type) {
  return static_cast<int>(list_devices(std::move(device_type)).size());
}

std::optional<int> local_gpu() {
  std::lock_guard lock(state_mutex);
  return chosen_gpu;
}

int require_local_gpu() {
  std::lock_guard lock(state_mutex);
  if (!chosen_gpu) throw ValueError(str("this process has no GPU to use: ", no_gpu_reason));
  return *chosen_gpu;
}

std::shared_ptr<Communicator> gpu_world() {
  std::lock_guard lock(state_mutex);
  return gpu_world_communicator;
}

ScopedGpuWorldOverride::ScopedGpuWorldOverride(std::shared_ptr<Communicator> group) {
  clear_mesh_axis_groups();  // made again, with twins split from `group`
  std::shared_ptr<Communicator> world = world_pointer();
  std::lock_guard lock(state_mutex);
  previous_ = gpu_world_communicator;
  gpu_world_communicator = std::move(group);
  world->set_device_twin(gpu_world_communicator);
}

ScopedGpuWorldOverride::~ScopedGpuWorldOverride() {
  clear_mesh_axis_groups();
  std::shared_ptr<Communicator> world = world_pointer();
  std::lock_guard lock(state_mutex);
  gpu_world_communicator = previous_;
  world->set_device_twin(gpu_world_communicator);
}

void note_distribution_created() { distribution_created = true; }

}  // namespace keras::distribution
