// Caching allocator: per-device free lists keyed by rounded size.
#include "engine/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "engine/errors.h"
#include "engine/gpu_provider.h"

namespace keras {
namespace {

constexpr std::size_t kAlignment = 64;  // one cache line; also what AVX-512 loads like

// Rounds small blocks to 64 B and larger ones to a quarter of their power of two, so at most
// 25% is wasted and a step's shapes reuse the same lists.
std::size_t round_size(std::size_t bytes) {
  // No machine has 2^62 bytes; refusing here keeps the rounding below from overflowing.
  if (bytes > (std::size_t{1} << 62)) {
    throw OutOfMemoryError(str("cannot allocate ", bytes, " bytes: more than any machine has"));
  }
  if (bytes <= 4096) return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  std::size_t power = 1;
  while (power < bytes) power <<= 1;
  std::size_t quarter = power / 4;
  return (bytes + quarter - 1) / quarter * quarter;
}

struct Pool {
  std::mutex mutex;
  std::map<std::size_t, std::vector<void*>> free_blocks;
  AllocatorStats stats;
  bool is_cpu = true;
  // Gives cached CPU blocks back at exit so leak checkers see a clean heap. GPU blocks are
  // left to the driver: the CUDA context may already be gone when statics are destroyed.
  ~Pool() {
    if (!is_cpu) return;
    for (auto& [size, blocks] : free_blocks) {
      for (void* block : blocks) std::free(block);
    }
  }
};

Pool& pool_for(Device device) {
  static Pool cpu_pool;
  static Pool gpu_pools[16];
  static bool marked = [] {
    for (Pool& pool : gpu_pools) pool.is_cpu = false;
    return true;
  }();
  (void)marked;
  if (device.is_cpu()) return cpu_pool;
  if (device.index < 0 || device.index >= 16) {
    throw ValueError(str("device ", device.to_string(), " is out of range; at most 16 GPUs"));
  }
  return gpu_pools[device.index];
}

void* system_allocate(std::size_t bytes, Device device) {
  if (device.is_gpu()) {
    GpuProvider& gpus = gpu_provider();
    try {
      return gpus.allocate(bytes, device.index);
    } catch (const OutOfMemoryError&) {
      // As below: cached blocks of other sizes may add up to enough. Free them and retry once.
      release_cached_memory();
      return gpus.allocate(bytes, device.index);
    }
  }
  void* pointer = std::aligned_alloc(kAlignment, bytes);
  if (pointer == nullptr) {
    // The cache may hold enough memory in blocks of other sizes: give it back and retry once.
    release_cached_memory();
    pointer = std::aligned_alloc(kAlignment, bytes);
  }
  if (pointer == nullptr) {
    throw OutOfMemoryError(str("out of memory: could not allocate ", bytes, " bytes (",
                               static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0),
                               " GiB) on ", device.to_string()));
  }
  return pointer;
}

void system_free(void* pointer, Device device) {
  if (device.is_gpu()) {
    gpu_provider().free(pointer, device.index);
  } else {
    std::free(pointer);
  }
}

}  // namespace

namespace {
thread_local AllocationBudget* current_budget = nullptr;
}  // namespace

AllocationBudget::AllocationBudget(std::size_t bytes, std::string what)
    : limit_(bytes), what_(std::move(what)), in_use_(std::make_shared<std::atomic<std::int64_t>>(0)),
      outer_(current_budget) {
  current_budget = this;
}

// Scopes end in the reverse order they began, on their own thread (they are locals).
AllocationBudget::~AllocationBudget() { current_budget = outer_; }

Storage::Storage(std::size_t bytes, Device device) : bytes_(bytes), device_(device) {
  capacity_ = round_size(bytes == 0 ? 1 : bytes);
  if (AllocationBudget* budget = current_budget) {
    std::int64_t held = budget->in_use_->fetch_add(static_cast<std::int64_t>(capacity_)) +
                        static_cast<std::int64_t>(capacity_);
    if (held > static_cast<std::int64_t>(budget->limit_)) {
      budget->in_use_->fetch_sub(static_cast<std::int64_t>(capacity_));
      throw OutOfMemoryError(str(budget->what_, ": a tensor of ", bytes, " bytes would take the memory held past ",
                                 budget->limit_, " bytes, more than it can need"));
    }
    budget_in_use_ = budget->in_use_;
  }
  // Whatever the allocation below throws, the budget gets its bytes back.
  struct GiveBack {
    Storage* storage;
    bool armed = true;
    ~GiveBack() {
      if (armed && storage->budget_in_use_) storage->budget_in_use_->fetch_sub(static_cast<std::int64_t>(storage->capacity_));
    }
  } give_back{this};
  Pool& pool = pool_for(device);
  {
    std::lock_guard lock(pool.mutex);
    auto found = pool.free_blocks.find(capacity_);
    if (found != pool.free_blocks.end() && !found->second.empty()) {
      data_ = found->second.back();
      found->second.pop_back();
      pool.stats.cached_bytes -= capacity_;
      pool.stats.in_use_bytes += capacity_;
      pool.stats.cached_allocations += 1;
      give_back.armed = false;
      return;
    }
  }
  data_ = system_allocate(capacity_, device);
  give_back.armed = false;
  std::lock_guard lock(pool.mutex);
  pool.stats.fresh_allocations += 1;
  pool.stats.in_use_bytes += capacity_;
}

Storage::Storage(std::shared_ptr<Storage> parent, std::size_t offset, std::size_t bytes)
    : bytes_(bytes), device_(parent->device()), parent_(std::move(parent)) {
  if (offset > parent_->bytes() || bytes > parent_->bytes() - offset) {
    throw ValueError(str("storage view of ", bytes, " bytes at offset ", offset,
                         " does not fit in a storage of ", parent_->bytes(), " bytes"));
  }
  data_ = static_cast<char*>(parent_->data()) + offset;
}

Storage::~Storage() {
  if (parent_) return;  // a view owns nothing
  if (budget_in_use_) budget_in_use_->fetch_sub(static_cast<std::int64_t>(capacity_));
  Pool& pool = pool_for(device_);
  std::lock_guard lock(pool.mutex);
  pool.free_blocks[capacity_].push_back(data_);
  pool.stats.cached_bytes += capacity_;
  pool.stats.in_use_bytes -= capacity_;
}

AllocatorStats allocator_stats(Device device) {
  Pool& pool = pool_for(device);
  std::lock_guard lock(pool.mutex);
  return pool.stats;
}

void release_cached_memory() {
  auto drain = [](Pool& pool, Device device) {
    std::lock_guard lock(pool.mutex);
    // Each block leaves its list before it is freed: if a free fails (a GPU after a fault),
    // no freed block stays listed to be handed out, or freed, again.
    for (auto& [size, blocks] : pool.free_blocks) {
      while (!blocks.empty()) {
        void* block = blocks.back();
        blocks.pop_back();
        pool.stats.cached_bytes -= std::min(pool.stats.cached_bytes, size);
        system_free(block, device);
      }
    }
    pool.free_blocks.clear();
    pool.stats.cached_bytes = 0;
  };
  drain(pool_for(Device::cpu()), Device::cpu());
  int gpus = gpu_provider().count();
  for (int index = 0; index < gpus && index < 16; ++index) {
    drain(pool_for(Device::gpu(index)), Device::gpu(index));
  }
}

}  // namespace keras
