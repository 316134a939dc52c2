// Collectives between GPUs with NCCL, one GPU per process. The buffers are device memory of
// this process's GPU; each collective runs on a communication stream that first waits for
// everything queued so far on the device's compute stream, and the compute stream then waits
// for the collective, so kernels queued afterwards see its result. The host does not wait:
// a call returns once the collective is queued (stream order, as in PyTorch's NCCL backend).
//
// start_all_reduce leaves the compute stream free until wait_for_started_all_reduces(): the
// data-parallel gradient buckets are reduced while the rest of backward runs.
//
// No hang: a watchdog thread follows every queued collective. When one has not completed by
// the group's deadline, or NCCL reports an asynchronous error, it aborts the NCCL communicator
// (ncclCommAbort, which makes the kernels waiting on a peer return) and records the failure;
// the next call on this communicator, and finalize(), raise CollectiveError naming the
// operation and the group.
//
// Agreement: the ranks compare a collective's signature (kind, dtype, count) over the host
// group the first time this process issues that signature, on the CPU side channel, so the
// steady state of a training loop (the same buckets every step) adds no host round trip. A
// signature seen before is not compared again; a mismatch between two known signatures is
// then caught by the deadline instead, with less precise words.
#pragma once
#include <array>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "distribution/runtime/communicator.h"

namespace keras::distribution {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `host_group`'s processes, which each give their own GPU: rank 0 creates
  // the NCCL unique id and host_group broadcasts it.
  NcclCommunicator(std::shared_ptr<Communicator> host_group, int device_index, std::string name);
  ~NcclCommunicator() override;

  bool accepts(Device device) const override { return device == Device::gpu(device_index_); }

  void all_reduce(void* data, std::int64_t count, DType dtype, ReduceOperation operation) override;
  void all_gather(const void* send, void* receive, std::int64_t count, DType dtype) override;
  void reduce_scatter(const void* send, void* receive, std::int64_t count, DType dtype,
                      ReduceOperation operation) override;
  void broadcast(void* data, std::int64_t count, DType dtype, int root) override;
  // The compute stream does not wait for it until wait_for_started_all_reduces().
  void start_all_reduce(void* data, std::int64_t count, DType dtype,
                        ReduceOperation operation) override;
  void wait_for_started_all_reduces() override;
  // Waits (on the host) until every collective queued so far has completed.
  void barrier() override;
  std::shared_ptr<Communicator> split(int color, int key, const std::string& name) override;
  // The host twin's leave() tells the peers; NCCL has nothing of its own to say.
  void leave() override {}

  struct State;  // NCCL and CUDA handles (nccl_communicator.cpp)

 private:
  NcclCommunicator(std::shared_ptr<Communicator> host_group, int device_index, std::string name,
                   std::unique_ptr<State> state);
  void start_watchdog();
  void check_usable() const;
  // Through the host group, the first time each signature is seen: once the processes agreed
  // on one, its later calls cost no host round trip (agreed_signatures_).
  std::optional<std::vector<std::int64_t>> exchange_signatures(const Signature& mine,
                                                               const char* what) override;
  template <typename Call>
  void run(const char* operation, std::int64_t code, DType dtype, std::int64_t count,
           bool compute_waits, Call&& call);
  void watch();
  void queue_all_reduce(void* data, std::int64_t count, DType dtype, ReduceOperation operation,
                        bool compute_waits);
  // With comm_mutex_ held: aborts the communicator (once) and records `reason`, which every
  // later call raises.
  void abort_holding_lock(const std::string& reason);

  std::shared_ptr<Communicator> host_group_;
  int device_index_;
  std::unique_ptr<State> state_;
  std::set<std::array<std::int64_t, 3>> agreed_signatures_;

  // Held around every NCCL call on the communicator, the calling thread's and the watchdog's:
  // a communicator is not thread-safe, and ncclCommAbort frees it. Taken before mutex_, never
  // after.
  std::mutex comm_mutex_;
  bool started_unwaited_ = false;  // a start_all_reduce the compute stream does not wait for yet

  mutable std::mutex mutex_;  // the watchdog's queue and the failure
  std::condition_variable wake_;
  struct Pending;
  std::deque<std::unique_ptr<Pending>> pending_;
  std::string failure_;  // set by the watchdog
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace keras::distribution
