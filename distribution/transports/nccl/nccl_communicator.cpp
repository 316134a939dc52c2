// NCCL communicator: unique-id exchange over the host group, non-blocking NCCL communicators
// (so a stuck one can be aborted), collectives ordered between the compute and communication
// streams with events, and the watchdog thread.
#include "distribution/transports/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "distribution/runtime/collective_failure.h"
#include "distribution/runtime/collective_signature.h"
#include "engine/gpu_runtime.h"

namespace keras::distribution {
namespace {

using Clock = std::chrono::steady_clock;

void check_cuda(cudaError_t status, const char* call, int device) {
  if (status != cudaSuccess) {
    throw CollectiveError(str(call, " failed on gpu:", device, ": ", cudaGetErrorString(status)));
  }
}

ncclDataType_t nccl_type(DType dtype, const char* operation) {
  switch (dtype) {
    case DType::float32: return ncclFloat32;
    case DType::float64: return ncclFloat64;
    case DType::int32: return ncclInt32;
    case DType::int64: return ncclInt64;
    case DType::uint8: return ncclUint8;
    case DType::bfloat16: return ncclBfloat16;
    case DType::float16: return ncclFloat16;
    default: break;
  }
  throw DTypeError(str(operation, " over NCCL supports float32, float64, int32, int64, uint8, ",
                       "bfloat16 and float16, got ", dtype_name(dtype)));
}

ncclRedOp_t nccl_operation(ReduceOperation operation) {
  switch (operation) {
    case ReduceOperation::sum: return ncclSum;
    case ReduceOperation::mean: return ncclAvg;
    case ReduceOperation::max: return ncclMax;
    case ReduceOperation::min: return ncclMin;
  }
  return ncclSum;
}

}  // namespace

struct NcclCommunicator::State {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;        // communication
  cudaStream_t compute_stream = nullptr;  // the device's compute stream
  bool aborted = false;
};

struct NcclCommunicator::Pending {
  cudaEvent_t done = nullptr;
  Clock::time_point deadline;
  std::string what;  // "all_reduce (sum) of 4 float32 elements"
};

namespace {

// Waits for a non-blocking communicator to leave ncclInProgress (initialisation, split, a
// call being queued), up to the deadline. Returns what went wrong, if anything: the caller
// aborts the communicator and records why (so that nothing uses it afterwards).
std::optional<std::string> wait_until_ready(ncclComm_t comm, const std::string& what,
                                            Clock::time_point deadline) {
  ncclResult_t state = ncclInProgress;
  while (true) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclInternalError;
    if (state != ncclInProgress) break;
    if (Clock::now() > deadline) return str(what, " did not complete before the collective deadline");
    std::this_thread::yield();
  }
  if (state != ncclSuccess) {
    return str(what, " failed: ", ncclGetErrorString(state), " (", ncclGetLastError(comm), ")");
  }
  return std::nullopt;
}

ncclConfig_t non_blocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

}  // namespace

NcclCommunicator::NcclCommunicator(std::shared_ptr<Communicator> host_group, int device_index,
                                   std::string name)
    : Communicator(std::move(name), host_group->rank(), host_group->size()),
      host_group_(std::move(host_group)),
      device_index_(device_index),
      state_(std::make_unique<State>()) {
  timeout_ = host_group_->timeout();
  ncclUniqueId id{};
  if (rank_ == 0) {
    ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) {
      throw CollectiveError(str("ncclGetUniqueId failed for group '", name_, "': ",
                                ncclGetErrorString(result)));
    }
  }
  static_assert(sizeof(ncclUniqueId) % sizeof(std::int64_t) == 0);
  host_group_->broadcast(&id, sizeof(id) / sizeof(std::int64_t), DType::int64, 0);
  check_cuda(cudaSetDevice(device_index_), "cudaSetDevice", device_index_);
  ncclConfig_t config = non_blocking_config();
  ncclResult_t result = ncclCommInitRankConfig(&state_->comm, size_, id, rank_, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    throw CollectiveError(str("ncclCommInitRankConfig failed for group '", name_, "' (rank ",
                              rank_, " of ", size_, ", gpu:", device_index_, "): ",
                              ncclGetErrorString(result)));
  }
  if (auto error = wait_until_ready(state_->comm,
                                    str("creating the NCCL communicator of group '", name_, "'"),
                                    Clock::now() + timeout_)) {
    ncclCommAbort(state_->comm);  // no other thread knows it yet
    throw CollectiveError(*error);
  }
  start_watchdog();
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<Communicator> host_group, int device_index,
                                   std::string name, std::unique_ptr<State> state)
    : Communicator(std::move(name), host_group->rank(), host_group->size()),
      host_group_(std::move(host_group)),
      device_index_(device_index),
      state_(std::move(state)) {
  timeout_ = host_group_->timeout();
  start_watchdog();
}

void NcclCommunicator::start_watchdog() {
  check_cuda(cudaSetDevice(device_index_), "cudaSetDevice", device_index_);
  check_cuda(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking),
             "cudaStreamCreateWithFlags", device_index_);
  state_->compute_stream = static_cast<cudaStream_t>(gpu::compute_stream(device_index_));
  watchdog_ = std::thread([this] { watch(); });
}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  std::lock_guard comm_lock(comm_mutex_);
  cudaSetDevice(device_index_);
  for (auto& pending : pending_) cudaEventDestroy(pending->done);
  if (state_->comm != nullptr) {
    if (state_->aborted || !failure_.empty()) {
      if (!state_->aborted) ncclCommAbort(state_->comm);
    } else {
      // Finalize flushes outstanding work; non-blocking, so bounded by the deadline.
      ncclResult_t state = ncclCommFinalize(state_->comm);
      auto deadline = Clock::now() + timeout_;
      while (state == ncclInProgress && Clock::now() < deadline) {
        if (ncclCommGetAsyncError(state_->comm, &state) != ncclSuccess) state = ncclInternalError;
        std::this_thread::yield();
      }
      if (state == ncclSuccess) {
        ncclCommDestroy(state_->comm);
      } else {
        ncclCommAbort(state_->comm);
      }
    }
  }
  if (state_->stream != nullptr) cudaStreamDestroy(state_->stream);
}

void NcclCommunicator::abort_holding_lock(const std::string& reason) {
  if (!state_->aborted) {
    ncclCommAbort(state_->comm);
    state_->aborted = true;
  }
  {
    std::lock_guard lock(mutex_);
    if (failure_.empty()) failure_ = reason;
  }
  record_collective_failure(reason);
  wake_.notify_all();
}

void NcclCommunicator::check_usable() const {
  std::lock_guard lock(mutex_);
  if (!failure_.empty()) {
    throw CollectiveError(str("the NCCL communicator of group '", name_, "' was aborted: ",
                              failure_));
  }
}

std::optional<std::vector<std::int64_t>> NcclCommunicator::exchange_signatures(const Signature& mine,
                                                                               const char*) {
  if (agreed_signatures_.count(mine) != 0) return std::nullopt;
  std::vector<std::int64_t> every(3 * static_cast<std::size_t>(size_));
  host_group_->all_gather(mine.data(), every.data(), 3, DType::int64);
  return every;
}

template <typename Call>
void NcclCommunicator::run(const char* operation, std::int64_t code, DType dtype,
                           std::int64_t count, bool compute_waits, Call&& call) {
  check_usable();
  check_signature(code, dtype, count, operation);
  agreed_signatures_.insert({code, static_cast<std::int64_t>(dtype), count});
  ncclDataType_t type = nccl_type(dtype, operation);
  std::string what = describe_collective(code, static_cast<std::int64_t>(dtype), count);
  std::lock_guard comm_lock(comm_mutex_);
  check_usable();  // the watchdog may have aborted it meanwhile
  int device = device_index_;
  check_cuda(cudaSetDevice(device), "cudaSetDevice", device);
  cudaEvent_t ready = nullptr, done = nullptr;
  check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate", device);
  check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate", device);
  // The collective reads what the compute stream wrote; later kernels read what it wrote.
  check_cuda(cudaEventRecord(ready, state_->compute_stream), "cudaEventRecord", device);
  check_cuda(cudaStreamWaitEvent(state_->stream, ready, 0), "cudaStreamWaitEvent", device);
  cudaEventDestroy(ready);
  ncclResult_t result = call(type, state_->stream);
  std::optional<std::string> error;
  if (result == ncclInProgress) {
    error = wait_until_ready(state_->comm, str(what, " on group '", name_, "'"),
                             Clock::now() + timeout_);
  } else if (result != ncclSuccess) {
    error = str(what, " on group '", name_, "' failed: ", ncclGetErrorString(result), " (",
                ncclGetLastError(state_->comm), ")");
  }
  if (error) {
    cudaEventDestroy(done);
    abort_holding_lock(*error);
    throw CollectiveError(*error);
  }
  check_cuda(cudaEventRecord(done, state_->stream), "cudaEventRecord", device);
  if (compute_waits) {
    check_cuda(cudaStreamWaitEvent(state_->compute_stream, done, 0), "cudaStreamWaitEvent", device);
  } else {
    started_unwaited_ = true;
  }
  auto pending = std::make_unique<Pending>();
  pending->done = done;
  pending->deadline = Clock::now() + timeout_;
  pending->what = std::move(what);
  {
    std::lock_guard lock(mutex_);
    pending_.push_back(std::move(pending));
  }
  wake_.notify_all();
}

void NcclCommunicator::start_all_reduce(void* data, std::int64_t count, DType dtype,
                                        ReduceOperation operation) {
  queue_all_reduce(data, count, dtype, operation, /*compute_waits=*/false);
}

void NcclCommunicator::wait_for_started_all_reduces() {
  std::lock_guard comm_lock(comm_mutex_);
  if (!started_unwaited_) return;
  // The collectives run in order on the communication stream: one event after the last covers
  // them all.
  int device = device_index_;
  check_cuda(cudaSetDevice(device), "cudaSetDevice", device);
  cudaEvent_t all_done = nullptr;
  check_cuda(cudaEventCreateWithFlags(&all_done, cudaEventDisableTiming), "cudaEventCreate", device);
  check_cuda(cudaEventRecord(all_done, state_->stream), "cudaEventRecord", device);
  check_cuda(cudaStreamWaitEvent(state_->compute_stream, all_done, 0), "cudaStreamWaitEvent", device);
  cudaEventDestroy(all_done);  // released once it has completed
  started_unwaited_ = false;
}

// Polls the oldest pending collective every millisecond (a completed event costs one
// cudaEventQuery), and NCCL's asynchronous error.
void NcclCommunicator::watch() {
  cudaSetDevice(device_index_);
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (pending_.empty() || !failure_.empty()) {
      wake_.wait(lock, [&] { return stopping_ || (!pending_.empty() && failure_.empty()); });
      continue;
    }
    Pending& oldest = *pending_.front();  // only this thread pops, so it stays put
    cudaError_t status = cudaEventQuery(oldest.done);
    if (status == cudaSuccess) {
      cudaEventDestroy(oldest.done);
      pending_.pop_front();
      // The next one's time starts no earlier than now: a collective queued behind a long one
      // is not aborted for the time it waited its turn.
      if (!pending_.empty()) {
        pending_.front()->deadline = std::max(pending_.front()->deadline, Clock::now() + timeout_);
      }
      continue;
    }
    std::string what = oldest.what;
    Clock::time_point deadline = oldest.deadline;
    // NCCL calls take comm_mutex_, and never with mutex_ held (the caller's order is
    // comm_mutex_, then mutex_).
    lock.unlock();
    bool aborted = false;
    {
      std::lock_guard comm_lock(comm_mutex_);
      ncclResult_t asynchronous = ncclSuccess;
      if (!state_->aborted) ncclCommGetAsyncError(state_->comm, &asynchronous);
      std::string reason;
      if (state_->aborted) {
        aborted = true;  // by the calling thread, which recorded why
      } else if (status != cudaErrorNotReady) {
        reason = str("CUDA reported ", cudaGetErrorString(status));
      } else if (asynchronous != ncclSuccess && asynchronous != ncclInProgress) {
        reason = str("NCCL reported ", ncclGetErrorString(asynchronous), " (",
                     ncclGetLastError(state_->comm), ")");
      } else if (Clock::now() > deadline) {
        reason = str("it did not complete within ", timeout_.count(), " ms (a peer process may ",
                     "have stopped, or issued a different collective)");
      }
      if (!reason.empty()) {
        abort_holding_lock(str(what, " on group '", name_, "' (rank ", rank_, " of ", size_,
                               ", gpu:", device_index_, "): ", reason));
        aborted = true;
      }
    }
    lock.lock();
    if (!aborted) wake_.wait_for(lock, std::chrono::milliseconds(1));
  }
}

void NcclCommunicator::all_reduce(void* data, std::int64_t count, DType dtype,
                                  ReduceOperation operation) {
  queue_all_reduce(data, count, dtype, operation, /*compute_waits=*/true);
}

void NcclCommunicator::queue_all_reduce(void* data, std::int64_t count, DType dtype,
                                        ReduceOperation operation, bool compute_waits) {
  run("all_reduce", collective_code(CollectiveKind::all_reduce, static_cast<std::int64_t>(operation)),
      dtype, count, compute_waits, [&](ncclDataType_t type, cudaStream_t stream) {
        return ncclAllReduce(data, data, static_cast<std::size_t>(count), type,
                             nccl_operation(operation), state_->comm, stream);
      });
}

void NcclCommunicator::all_gather(const void* send, void* receive, std::int64_t count,
                                  DType dtype) {
  run("all_gather", collective_code(CollectiveKind::all_gather), dtype, count, true,
      [&](ncclDataType_t type, cudaStream_t stream) {
        return ncclAllGather(send, receive, static_cast<std::size_t>(count), type, state_->comm,
                             stream);
      });
}

void NcclCommunicator::reduce_scatter(const void* send, void* receive, std::int64_t count,
                                      DType dtype, ReduceOperation operation) {
  run("reduce_scatter",
      collective_code(CollectiveKind::reduce_scatter, static_cast<std::int64_t>(operation)), dtype,
      count, true, [&](ncclDataType_t type, cudaStream_t stream) {
        return ncclReduceScatter(send, receive, static_cast<std::size_t>(count), type,
                                 nccl_operation(operation), state_->comm, stream);
      });
}

void NcclCommunicator::broadcast(void* data, std::int64_t count, DType dtype, int root) {
  if (root < 0 || root >= size_) {
    throw ValueError(str("broadcast root ", root, " is out of range for group '", name_,
                         "' of ", size_, " processes"));
  }
  run("broadcast", collective_code(CollectiveKind::broadcast, root), dtype, count, true,
      [&](ncclDataType_t type, cudaStream_t stream) {
        return ncclBroadcast(data, data, static_cast<std::size_t>(count), type, root,
                             state_->comm, stream);
      });
}

void NcclCommunicator::barrier() {
  check_usable();
  // Everything queued so far, then the host group's barrier.
  while (true) {
    {
      std::lock_guard lock(mutex_);
      if (!failure_.empty() || pending_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  check_usable();
  host_group_->barrier();
}

std::shared_ptr<Communicator> NcclCommunicator::split(int color, int key, const std::string& name) {
  check_usable();
  std::shared_ptr<Communicator> host_split = host_group_->split(color, key, name);
  auto state = std::make_unique<State>();
  ncclConfig_t config = non_blocking_config();
  std::lock_guard comm_lock(comm_mutex_);
  check_usable();
  check_cuda(cudaSetDevice(device_index_), "cudaSetDevice", device_index_);
  ncclResult_t result = ncclCommSplit(state_->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key,
                                      &state->comm, &config);
  std::optional<std::string> error;
  if (result != ncclSuccess && result != ncclInProgress) {
    error = str("ncclCommSplit of group '", name_, "' into '", name, "' failed: ",
                ncclGetErrorString(result));
  } else {
    // The new communicator is made by an asynchronous job of the parent's: the parent first.
    error = wait_until_ready(state_->comm, str("splitting group '", name_, "' into '", name, "'"),
                             Clock::now() + timeout_);
  }
  if (error) {
    abort_holding_lock(*error);
    throw CollectiveError(*error);
  }
  if (color < 0) return nullptr;
  if (auto child_error = wait_until_ready(
          state->comm, str("creating the NCCL communicator of group '", name, "'"),
          Clock::now() + timeout_)) {
    ncclCommAbort(state->comm);  // no other thread knows it yet
    record_collective_failure(*child_error);
    throw CollectiveError(*child_error);
  }
  return std::shared_ptr<Communicator>(
      new NcclCommunicator(host_split, device_index_, name, std::move(state)));
}

}  // namespace keras::distribution
