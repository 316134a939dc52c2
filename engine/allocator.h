// Caching allocator for tensor storage. Touching a fresh page costs about 14 µs per 4 KiB in
// these VMs (measured), so a training step that allocated its activations anew would spend
// milliseconds in page faults. Freed blocks are kept in per-size free lists and handed out again;
// sizes are rounded up so that the same tensor shapes hit the same list every step.
#pragma once
#include <cstddef>
#include <memory>

#include "engine/device.h"

namespace keras {

// A block of device memory owned by one or more tensors (through shared_ptr).
class Storage {
 public:
  Storage(std::size_t bytes, Device device);
  // A view of `bytes` bytes of `parent` starting at `offset`: shares (and keeps alive) the
  // parent's memory, returns nothing to the pool.
  Storage(std::shared_ptr<Storage> parent, std::size_t offset, std::size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t capacity_ = 0;
  Device device_;
  std::shared_ptr<Storage> parent_;  // set for views
};

struct AllocatorStats {
  std::size_t cached_bytes = 0;    // held in free lists
  std::size_t in_use_bytes = 0;    // owned by live tensors
  std::size_t fresh_allocations = 0;  // blocks that had to come from the system
  std::size_t cached_allocations = 0;  // blocks handed out again from the free lists
};
AllocatorStats allocator_stats(Device device);
// Gives every cached block back to the system.
void release_cached_memory();

}  // namespace keras
