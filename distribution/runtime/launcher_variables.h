// The job as cluster launchers describe it in the environment, for initialize() when neither its
// arguments nor Keras' KERAS_DISTRIBUTION_* variables say (those win, as Keras' own): first the
// variables torchrun sets, which Kubernetes' training operators (PyTorchJob, JobSet recipes) set
// too — MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK — then Slurm's inside an `srun` step —
// SLURM_PROCID, SLURM_NTASKS and SLURM_STEP_NODELIST, whose first node hosts the coordinator on
// a port derived from SLURM_JOB_ID, as JAX's initialize() derives it. A job under mpirun is
// mpirun's (checked before these). Every number is validated with the variable named.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace keras::distribution {

// The most processes a job may name, through a launcher's variables or initialize()'s: far
// beyond any machine here, small enough that no count derived from it overflows.
inline constexpr std::int64_t kMaximumProcesses = 1 << 20;

struct LauncherJob {
  std::string launcher;     // "torchrun's variables" or "Slurm", for messages
  std::string coordinator;  // host:port of process 0
  int num_processes = 1;
  int process_id = 0;
};

// The job the environment describes, or nullopt when no launcher's variables are set (or Slurm's
// describe a step of one task). A launcher's variables set only in part are a ValueError that
// names the missing ones.
std::optional<LauncherJob> job_from_launcher_variables();

// The first host of a Slurm node list in its compressed form: "node[03-10,12],gpu7" -> "node03",
// "gpu7,gpu8" -> "gpu7". A ValueError for a list it cannot read.
std::string first_slurm_node(const std::string& node_list);

// The coordinator's port for Slurm job `job_id`: in [61440, 65535], above Linux's ephemeral
// range (32768-60999), so no client socket of the host holds it by chance.
int slurm_coordinator_port(long long job_id);

}  // namespace keras::distribution
