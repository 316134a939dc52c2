// Helpers shared by the libFuzzer harnesses: a scratch file per process and a hard failure that
// libFuzzer reports as a crash (with the input saved as crash-<sha1>).
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace keras::fuzz {

// Prints the reason and aborts: libFuzzer turns the SIGABRT into a crash report.
[[noreturn]] inline void fail(const std::string& message) {
  std::fprintf(stderr, "fuzz harness check failed: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

// $TMPDIR when set (scripts/run_fuzzers.sh points it at a fresh directory), else /dev/shm,
// else /tmp; one fixed name per process and suffix, so files are reused, not accumulated.
inline std::string scratch_path(const char* harness, const char* suffix) {
  const char* directory = std::getenv("TMPDIR");
  if (directory == nullptr || *directory == '\0') {
    directory = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  }
  return std::string(directory) + "/keras_fuzz_" + harness + "_" + std::to_string(::getpid()) +
         suffix;
}

inline void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) fail("cannot create " + path);
  if (size > 0 && std::fwrite(data, 1, size, file) != size) fail("cannot write " + path);
  if (std::fclose(file) != 0) fail("cannot close " + path);
}

// Removes the scratch files at exit (best effort: a crash leaves them for the script to clean).
struct ScratchFiles {
  std::string paths[2];
  ~ScratchFiles() {
    for (const std::string& path : paths) {
      if (!path.empty()) std::remove(path.c_str());
    }
  }
};

}  // namespace keras::fuzz
