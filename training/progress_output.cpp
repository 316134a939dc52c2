// The terminal test behind verbose="auto" and the progress bar (see the header for the rule).
#include "training/progress_output.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "engine/errors.h"

namespace keras {
namespace {

enum class ProgressSetting { automatic, bar, lines };

ProgressSetting progress_setting() {
  const char* value = std::getenv("KERAS_PROGRESS");
  if (value == nullptr || *value == '\0' || std::string(value) == "auto") {
    return ProgressSetting::automatic;
  }
  if (std::string(value) == "bar") return ProgressSetting::bar;
  if (std::string(value) == "lines") return ProgressSetting::lines;
  throw ValueError(str("KERAS_PROGRESS='", value, "' is not one of auto, bar or lines"));
}

bool under_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

std::string process_name(pid_t pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name;
}

// Whether mpirun, this rank's parent, writes its standard output to a terminal.
bool mpirun_output_is_terminal() {
  const pid_t parent = getppid();
  const std::string name = process_name(parent);
  if (name != "mpirun" && name != "mpiexec" && name != "orterun" && name != "prterun") {
    return false;  // a remote daemon, or a launcher we do not know: no escape codes
  }
  char target[256];
  const std::string link = "/proc/" + std::to_string(parent) + "/fd/1";
  ssize_t length = readlink(link.c_str(), target, sizeof target - 1);
  if (length <= 0) return false;
  const std::string where(target, static_cast<std::size_t>(length));
  return where.rfind("/dev/pts/", 0) == 0 || where.rfind("/dev/tty", 0) == 0 ||
         where == "/dev/console";
}

}  // namespace

bool progress_reaches_terminal(std::FILE* stream) {
  switch (progress_setting()) {
    case ProgressSetting::bar:
      return true;
    case ProgressSetting::lines:
      return false;
    case ProgressSetting::automatic:
      break;
  }
  if (isatty(fileno(stream)) == 0) return false;
  return under_mpirun() ? mpirun_output_is_terminal() : true;
}

Verbose::Verbose(int level) : level_(level) {
  if (level < 0 || level > 2) {
    throw ValueError(str("verbose must be \"auto\", 0, 1 or 2, got ", level));
  }
}

Verbose::Verbose(const char* word) : Verbose(std::string(word == nullptr ? "" : word)) {}

Verbose::Verbose(const std::string& word) : level_(-1) {
  if (word != "auto") throw ValueError(str("verbose must be \"auto\", 0, 1 or 2, got \"", word, "\""));
}

int Verbose::resolve(std::FILE* stream) const {
  // Asked even for an explicit level, so a mistyped KERAS_PROGRESS is reported whatever
  // verbose says, not only where "auto" or the bar would read it.
  const bool terminal = progress_reaches_terminal(stream);
  if (!automatic()) return level_;
  return terminal ? 1 : 2;
}

}  // namespace keras
