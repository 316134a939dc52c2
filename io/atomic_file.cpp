// AtomicFile: the temporary's name, the clean-up of abandoned ones, and the syncs that make the
// rename durable.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <utility>

#include "engine/errors.h"

namespace keras::io {
namespace {

// A temporary of a dead process untouched for this long is removed by the next save.
constexpr std::chrono::minutes kAbandonedAfter{10};

std::string errno_text(int error_number) { return std::strerror(error_number); }

// Temporaries are named "<target>.tmp.<pid>.<host>.keras-XXXXXX" (mkstemp fills the X's), so
// that a later save can tell which ones belong to a process of this host that no longer exists
// (and never takes a user's "<target>.tmp.<something>" for one).
std::string temporary_prefix(const std::string& target_path) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown-host");
  return str(target_path, ".tmp.", ::getpid(), ".", host, ".keras-");
}

// Removes the temporaries of saves to `target_path` whose process died (a killed save cannot
// clean up after itself). Only this host's processes can be checked; others are left alone.
void remove_abandoned_temporaries(const std::string& target_path) {
  namespace fs = std::filesystem;
  fs::path target(target_path);
  fs::path directory = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::string prefix = target.filename().string() + ".tmp.";
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return;
  std::error_code error;
  for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    std::string name = it->path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    // The rest is "<pid>.<host>.keras-XXXXXX", the X's from mkstemp's alphabet.
    static constexpr std::string_view kMarker = ".keras-";
    const std::size_t tail = kMarker.size() + 6;
    std::string rest = name.substr(prefix.size());
    std::size_t dot = rest.find('.');
    if (dot == std::string::npos || rest.size() < dot + 1 + tail ||
        rest.compare(rest.size() - tail, kMarker.size(), kMarker) != 0) {
      continue;
    }
    bool mkstemp_suffix = true;
    for (std::size_t i = rest.size() - 6; i < rest.size(); ++i) {
      mkstemp_suffix = mkstemp_suffix && std::isalnum(static_cast<unsigned char>(rest[i]));
    }
    if (!mkstemp_suffix) continue;
    std::string pid_text = rest.substr(0, dot);
    std::string owner_host = rest.substr(dot + 1, rest.size() - dot - 1 - tail);
    long pid = 0;
    auto [stop, parse_error] = std::from_chars(pid_text.data(), pid_text.data() + pid_text.size(), pid);
    if (parse_error != std::errc() || stop != pid_text.data() + pid_text.size() || pid <= 0 ||
        owner_host != host) {
      continue;
    }
    // A process of another PID namespace on a host of the same name (containers) looks dead
    // from here, so only temporaries untouched for kAbandonedAfter are taken for abandoned.
    std::error_code time_error;
    auto modified = fs::last_write_time(it->path(), time_error);
    if (time_error || fs::file_time_type::clock::now() - modified < kAbandonedAfter) continue;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

// The permissions a file created normally would get (0666 less the umask), for the temporary
// that mkstemp creates 0600. The umask is read from /proc: calling umask() to read it would
// change it for a moment under every other thread.
mode_t default_file_mode() {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  unsigned mask = 022;
  if (status != nullptr) {
    char line[256];
    while (std::fgets(line, sizeof line, status) != nullptr) {
      if (std::sscanf(line, "Umask: %o", &mask) == 1) break;
    }
    std::fclose(status);
  }
  return static_cast<mode_t>(0666 & ~mask);
}

}  // namespace

AtomicFile::AtomicFile(std::string target_path, std::string caller)
    : caller_(std::move(caller)), target_path_(std::move(target_path)) {
  remove_abandoned_temporaries(target_path_);
  std::string pattern = temporary_prefix(target_path_) + "XXXXXX";
  int descriptor = ::mkstemp(pattern.data());
  if (descriptor < 0) {
    throw FileNotFoundError(str(caller_, ": cannot create a temporary file beside '",
                                target_path_, "' (", pattern, "): ", errno_text(errno)));
  }
  temporary_path_ = pattern;
  file_ = ::fdopen(descriptor, "wb");
  if (file_ == nullptr) {
    int error_number = errno;
    ::close(descriptor);
    std::remove(temporary_path_.c_str());
    throw Error(str(caller_, ": cannot open '", temporary_path_, "': ", errno_text(error_number)));
  }
  if (::fchmod(descriptor, default_file_mode()) != 0) {
    int error_number = errno;
    std::fclose(file_);
    std::remove(temporary_path_.c_str());
    throw Error(str(caller_, ": cannot set the permissions of '", temporary_path_, "': ",
                    errno_text(error_number)));
  }
}

AtomicFile::~AtomicFile() {
  if (file_ != nullptr) std::fclose(file_);
  if (!committed_) std::remove(temporary_path_.c_str());
}

void AtomicFile::write(const void* bytes, std::size_t count) {
  if (count > 0 && std::fwrite(bytes, 1, count, file_) != count) fail("write");
}

// Data reaches the disk before the rename (fsync of the file), and the rename itself after it
// (fsync of the directory): without the first a crash could leave the renamed file empty on
// filesystems that reorder metadata and data writes; without the second the old file could
// come back.
void AtomicFile::commit() {
  if (std::fflush(file_) != 0) fail("flush");
  if (::fsync(::fileno(file_)) != 0) fail("sync");
  std::FILE* file = file_;
  file_ = nullptr;
  if (std::fclose(file) != 0) fail("close");
  if (std::rename(temporary_path_.c_str(), target_path_.c_str()) != 0) fail("rename");
  committed_ = true;
  sync_parent_directory();
}

void AtomicFile::fail(const char* step) const {
  throw Error(str(caller_, ": could not ", step, " '", temporary_path_, "' (for '", target_path_,
                  "'): ", errno_text(errno)));
}

void AtomicFile::sync_parent_directory() const {
  std::filesystem::path parent = std::filesystem::path(target_path_).parent_path();
  if (parent.empty()) parent = ".";
  int directory = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY);
  if (directory < 0) {
    throw Error(str(caller_, ": saved '", target_path_, "' but cannot open its directory to make ",
                    "the rename durable: ", errno_text(errno)));
  }
  // EINVAL: the filesystem cannot sync directories (some network filesystems); nothing to do.
  int status = ::fsync(directory);
  int error_number = errno;
  ::close(directory);
  if (status != 0 && error_number != EINVAL) {
    throw Error(str(caller_, ": saved '", target_path_, "' but syncing its directory failed: ",
                    errno_text(error_number)));
  }
}

}  // namespace keras::io
