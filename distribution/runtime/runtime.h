// Process setup of the distribution module: initialize() (MPI under mpirun, one process
// otherwise), the global device list (one device per process), and the world communicator.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distribution/runtime/communicator.h"
#include "distribution/api/device_listing.h"

namespace keras::distribution {

// Sets up the processes. Each missing argument is read from KERAS_DISTRIBUTION_JOB_ADDRESSES,
// KERAS_DISTRIBUTION_NUM_PROCESSES, KERAS_DISTRIBUTION_PROCESS_ID and
// KERAS_DISTRIBUTION_JOB_TOKEN; explicit arguments win. Where none of them names the job, a
// cluster launcher's variables may: torchrun's (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK),
// then Slurm's inside an srun step (distribution/runtime/launcher_variables.h). Under mpirun, rank and size come from
// MPI and given values must agree with them. Without mpirun, processes started by hand meet at
// the coordinator (process 0's address); with a job token (a secret every process is given,
// distribution/transports/rendezvous/job_token.h) only processes that know it can join or read the job's
// keys, and without one any program that reaches the coordinator's port can, as with PyTorch's
// TCPStore. All processes agree on one random seed. Call it once, before creating any
// Distribution or model.
void initialize(std::optional<std::string> job_addresses = std::nullopt,
                std::optional<int> num_processes = std::nullopt,
                std::optional<int> process_id = std::nullopt,
                std::optional<std::string> job_token = std::nullopt);
bool is_initialized();

// A job's addresses as initialize() takes them (job_addresses, KERAS_DISTRIBUTION_JOB_ADDRESSES):
// "host:port", the coordinator's, or "host:port,host:port,…", one a process with the
// coordinator's first. Split at the commas, each checked to be host:port with a port in 1-65535,
// and a list of several checked to name num_processes processes when that is given; a
// ValueError quotes what is at fault.
std::vector<std::string> parse_job_addresses(const std::string& addresses,
                                             std::optional<int> num_processes);

int num_processes();
int process_id();
// The group of all processes (a LocalCommunicator before initialize or with one process).
Communicator& world();
std::shared_ptr<Communicator> world_pointer();

// This process's GPU, chosen by initialize() from its local rank (distribution/runtime/local_gpu.h);
// nullopt when the machine (or the build) has no GPU, when some host of the job runs more
// processes than it has GPUs (the job then runs on CPUs), or before initialize().
std::optional<int> local_gpu();
// The same GPU, or a ValueError saying why there is none ("host 'a' runs 3 processes but has
// 2 GPU(s)…"): for code that needs the GPU.
int require_local_gpu();
// The NCCL group of all processes' GPUs, made by initialize() under more than one process when
// the build has NCCL and every process has a GPU; null otherwise.
std::shared_ptr<Communicator> gpu_world();
// It is also world()'s device twin (Communicator::device_twin), and each mesh-axis group's twin
// is split from it.

// While it lives, gpu_world() is `group`, for GPU memory that NCCL does not serve: when another
// provider serves the gpu devices (engine/gpu_provider.h; tests/gpu_emulation/ pairs its
// emulated GPU with such a group), `group` runs their collectives. Mesh-axis groups made before
// are dropped and made again, with twins split from `group`.
class ScopedGpuWorldOverride {
 public:
  explicit ScopedGpuWorldOverride(std::shared_ptr<Communicator> group);
  ~ScopedGpuWorldOverride();
  ScopedGpuWorldOverride(const ScopedGpuWorldOverride&) = delete;
  ScopedGpuWorldOverride& operator=(const ScopedGpuWorldOverride&) = delete;

 private:
  std::shared_ptr<Communicator> previous_;
};

// Called by Distribution's constructor: initialize() refuses to run after this.
void note_distribution_created();
// Ends MPI (also done automatically at exit).
void finalize();

}  // namespace keras::distribution
