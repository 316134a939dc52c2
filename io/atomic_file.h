// A file written in full or not at all: the bytes go to a temporary of a unique name (mkstemp)
// beside the target, which is synced and renamed over it only once complete. Readers see the
// old file or the whole new one, even when two saves to one path overlap, and the temporaries
// of writers killed midway are removed by the next write to that path.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>

namespace keras::io {

// Removed on destruction unless commit() renamed it into place, so every exception path (a
// failing write, a GPU copy that throws) cleans up after itself.
class AtomicFile {
 public:
  // `caller` opens every error message ("save_safetensors"). Throws FileNotFoundError when the
  // temporary cannot be created, Error when it cannot be opened or given its permissions.
  AtomicFile(std::string target_path, std::string caller);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Throws Error when the bytes cannot be written.
  void write(const void* bytes, std::size_t count);
  // Replaces the target with what was written, durably; throws Error when any step fails.
  void commit();
  // The temporary's path, for a library that writes files by name (HDF5): what it writes there
  // is synced by commit() as well, being the same file.
  const std::string& temporary_path() const { return temporary_path_; }

 private:
  [[noreturn]] void fail(const char* step) const;
  void sync_parent_directory() const;

  std::string caller_;
  std::string temporary_path_;
  std::string target_path_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

}  // namespace keras::io
