// The job from torchrun's or Slurm's variables (see the header).
#include "distribution/runtime/launcher_variables.h"

#include <vector>

#include "engine/environment.h"
#include "engine/errors.h"

namespace keras::distribution {
namespace {

// The names among `names` whose variables are unset, joined for a message.
std::string missing(const std::vector<const char*>& names) {
  std::string text;
  for (const char* name : names) {
    if (!environment::get(name)) text += std::string(text.empty() ? "" : ", ") + name;
  }
  return text;
}

std::optional<LauncherJob> torchrun_job() {
  const std::vector<const char*> names = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"};
  std::optional<std::string> address = environment::get("MASTER_ADDR");
  std::optional<std::string> port_text = environment::get("MASTER_PORT");
  if (!address && !port_text) return std::nullopt;  // RANK alone is too common a name to mean a job
  std::string absent = missing(names);
  if (!absent.empty()) {
    throw ValueError(str("torchrun's variables are set only in part: ", absent, " missing; a job started "
                         "this way needs MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK (or Keras' "
                         "KERAS_DISTRIBUTION_JOB_ADDRESSES, _NUM_PROCESSES and _PROCESS_ID)"));
  }
  const std::int64_t port = environment::parse_integer("MASTER_PORT", *port_text, 1, 65535);
  // An IPv6 address goes in brackets before its port, as in a URL.
  const bool bare_ipv6 = address->find(':') != std::string::npos && address->front() != '[';
  if (bare_ipv6) address = str("[", *address, "]");
  const std::int64_t processes = *environment::integer("WORLD_SIZE", 1, kMaximumProcesses);
  const std::int64_t rank = *environment::integer("RANK", 0, processes - 1);
  return LauncherJob{"torchrun's variables", str(*address, ":", port), static_cast<int>(processes),
                     static_cast<int>(rank)};
}

std::optional<LauncherJob> slurm_job() {
  std::optional<std::string> nodes = environment::get("SLURM_STEP_NODELIST");
  if (!nodes) return std::nullopt;  // not inside an srun step (a batch script's own shell)
  const std::vector<const char*> names = {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID"};
  std::string absent = missing(names);
  if (!absent.empty()) {
    throw ValueError(str("Slurm's variables are set only in part: SLURM_STEP_NODELIST is set but ", absent,
                         " missing"));
  }
  const std::int64_t tasks = *environment::integer("SLURM_NTASKS", 1, kMaximumProcesses);
  if (tasks == 1) return std::nullopt;  // a step of one task is one process
  const std::int64_t rank = *environment::integer("SLURM_PROCID", 0, tasks - 1);
  const std::int64_t job_id = *environment::integer("SLURM_JOB_ID", 0, (std::int64_t{1} << 62));
  return LauncherJob{"Slurm", str(first_slurm_node(*nodes), ":", slurm_coordinator_port(job_id)),
                     static_cast<int>(tasks), static_cast<int>(rank)};
}

}  // namespace

std::optional<LauncherJob> job_from_launcher_variables() {
  if (std::optional<LauncherJob> job = torchrun_job()) return job;
  return slurm_job();
}

std::string first_slurm_node(const std::string& node_list) {
  // The first entry ends at the first comma outside brackets.
  std::string first;
  int depth = 0;
  for (char c : node_list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
    first += c;
  }
  // Each bracketed range list stands for its first number, zero padding kept:
  // "rack[1-2]-node[03-10,12]" -> "rack1-node03".
  auto unreadable = [&](const std::string& why) {
    return ValueError(str("SLURM_STEP_NODELIST=", node_list, " is not a Slurm node list (", why,
                          "); expected host names such as \"node[03-10,12],gpu7\""));
  };
  if (first.empty()) throw unreadable("its first entry is empty");
  std::string host;
  for (std::size_t i = 0; i < first.size(); ++i) {
    if (first[i] == ']') throw unreadable("a ']' without its '['");
    if (first[i] != '[') {
      host += first[i];
      continue;
    }
    const std::size_t close = first.find(']', i);
    if (close == std::string::npos) throw unreadable("a '[' without its ']'");
    std::string ranges = first.substr(i + 1, close - i - 1);
    std::string number = ranges.substr(0, ranges.find_first_of("-,"));
    if (number.empty() || number.find_first_not_of("0123456789") != std::string::npos) {
      throw unreadable(str("the range list [", ranges, "] does not start with a node number"));
    }
    host += number;
    i = close;
  }
  return host;
}

int slurm_coordinator_port(long long job_id) { return 61440 + static_cast<int>(job_id % 4096); }

}  // namespace keras::distribution
