// initialize() and finalize(): which kind of job this process is in (mpirun's, one started by
// hand, or one process alone), the world group, the shared seed and the GPU choice; the state
// they leave behind. Each kind's start and end is in its own file: distribution/transports/mpi/mpi_job.h,
// distribution/transports/rendezvous/rendezvous_job.h; the GPU choice is distribution/runtime/local_gpu.h.
#include "distribution/runtime/runtime.h"

#include <signal.h>

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <mutex>

#include "distribution/api/distribution.h"
#include "distribution/runtime/launcher_variables.h"
#include "distribution/runtime/local_gpu.h"
#include "distribution/transports/mpi/mpi_job.h"
#include "distribution/transports/rendezvous/job_token.h"
#include "distribution/transports/rendezvous/rendezvous_job.h"
#include "engine/environment.h"
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

// Gloo writes with writev(2), which raises SIGPIPE when a peer's connection is gone (a killed
// process). Its default action ends this process at once and without a word, before the failed
// collective can say which peer it lost: process 0 of netns_two_hosts_killed ended so, silent,
// about once in a few hundred runs. A job of several processes therefore ignores SIGPIPE, as
// Python does for every program (so PyTorch's Gloo never meets it): the write fails with EPIPE
// and the collective names the peer. A handler the program installed itself is left in place.
// The setting is inherited by programs this one executes (Python's subprocess resets it in its
// children; a C++ program that runs others may want to).
void ignore_broken_pipes() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) != 0) return;
  if ((current.sa_flags & SA_SIGINFO) != 0 || current.sa_handler != SIG_DFL) return;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, nullptr);
}

void finalize_at_exit() { finalize(); }

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

  // Neither the arguments nor Keras' variables name the job: a cluster launcher's variables may
  // (torchrun's, then Slurm's; launcher_variables.h). mpirun's job is mpirun's.
  if (!job_addresses && !num_processes_arg && !process_id_arg && !launched_by_mpirun()) {
    if (std::optional<LauncherJob> launched = job_from_launcher_variables()) {
      job_addresses = launched->coordinator;
      addresses = parse_job_addresses(*job_addresses, launched->num_processes);
      num_processes_arg = launched->num_processes;
      process_id_arg = launched->process_id;
    }
  }

  if (launched_by_mpirun()) {
    ignore_broken_pipes();
    world_communicator = start_mpi_job(num_processes_arg, process_id_arg, finalize_at_exit);
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
      ignore_broken_pipes();  // after every check that refuses the job: a refused one changes nothing
      world_communicator = join_job_by_rendezvous(addresses, *num_processes_arg, *process_id_arg, token);
      std::atexit(finalize_at_exit);
    } else {
      world_communicator = std::make_shared<LocalCommunicator>("world");
    }
  }
  // Every process starts from rank 0's seed, so replicated variables are initialised equal.
  std::uint64_t seed = next_random_seed();
  world_communicator->broadcast(&seed, 1, DType::int64, 0);
  set_random_seed(seed);
  GpuChoice choice = choose_job_gpu(world_communicator);
  chosen_gpu = choice.gpu;
  no_gpu_reason = choice.no_gpu_reason;
  gpu_world_communicator = choice.gpu_world;
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
  if (joined_by_rendezvous()) {
    leave_job_by_rendezvous(world_communicator);
    return;
  }
  end_mpi_job(world_communicator);
}

std::shared_ptr<Communicator> world_pointer() {
  std::lock_guard lock(state_mutex);
  if (!world_communicator) world_communicator = std::make_shared<LocalCommunicator>("world");
  return world_communicator;
}

Communicator& world() { return *world_pointer(); }
int num_processes() { return world().size(); }
int process_id() { return world().rank(); }

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
