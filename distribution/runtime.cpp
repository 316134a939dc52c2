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

#include "distribution/collective_failure.h"
#include "distribution/distribution.h"
#include "distribution/mpi/mpi_communicator.h"
#include "engine/environment.h"
#include "engine/gpu_runtime.h"
#include "engine/random.h"

namespace keras::distribution {
namespace {

std::mutex state_mutex;
bool initialized = false;
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
  if (num_processes && static_cast<int>(result.size()) != *num_processes) {
    throw ValueError(str("job_addresses ", quote_input(addresses), " lists ", result.size(),
                         " processes, but num_processes is ", *num_processes));
  }
  return result;
}

void initialize(std::optional<std::string> job_addresses, std::optional<int> num_processes_arg,
                std::optional<int> process_id_arg) {
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
  if (job_addresses) parse_job_addresses(*job_addresses, num_processes_arg);

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
    if (num_processes_arg && *num_processes_arg > 1) {
      throw ValueError(str("num_processes=", *num_processes_arg, " needs one process per device, ",
                           "started together: launch the program with `mpirun -np ",
                           *num_processes_arg, " <program>` (OpenMPI)"));
    }
    world_communicator = std::make_shared<LocalCommunicator>("world");
  }
  // Every process starts from rank 0's seed, so replicated variables are initialised equal.
  std::uint64_t seed = next_random_seed();
  world_communicator->broadcast(&seed, 1, DType::int64, 0);
  set_random_seed(seed);
  initialized = true;
}

bool is_initialized() {
  std::lock_guard lock(state_mutex);
  return initialized;
}

void finalize() {
  std::lock_guard lock(state_mutex);
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
  if (auto* mpi = dynamic_cast<MpiCommunicator*>(world_communicator.get())) {
    try {
      mpi->check_all_ranks_leaving();
    } catch (const CollectiveError& error) {
      abort_job(error.what());
    }
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

void note_distribution_created() { distribution_created = true; }

}  // namespace keras::distribution
