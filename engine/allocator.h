// Caching allocator for tensor storage. Touching a fresh page costs about 14 µs per 4 KiB in
// these VMs (measured), so a training step that allocated its activations anew would spend
// milliseconds in page faults. Freed blocks are kept in per-size free lists and handed out again;
// sizes are rounded up so that the same tensor shapes hit the same list every step.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

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
  std::shared_ptr<std::atomic<std::int64_t>> budget_in_use_;  // set while an AllocationBudget counted it
};

// Bounds the bytes that tensors made on this thread hold at once while it lives, for work
// driven by an untrusted file: load_model builds a model from a config before its weights can
// be checked, and a config that lies (Dense(units=10^12)) must fail with an error, not take
// the machine's memory. Past `bytes`, making a tensor throws OutOfMemoryError naming `what`.
// Scopes nest; the innermost counts.
class AllocationBudget {
 public:
  AllocationBudget(std::size_t bytes, std::string what);
  ~AllocationBudget();
  AllocationBudget(const AllocationBudget&) = delete;
  AllocationBudget& operator=(const AllocationBudget&) = delete;

 private:
  friend class Storage;
  std::size_t limit_;
  std::string what_;
  std::shared_ptr<std::atomic<std::int64_t>> in_use_;
  AllocationBudget* outer_;
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
