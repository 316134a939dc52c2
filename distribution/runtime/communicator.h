// Communicator: collectives over a group of processes, the only way distribution code moves data
// between processes. Backends: a size-1 local group (every collective is a no-op or a copy, so
// single-process code has no special branches), MPI for CPU processes (distribution/transports/mpi/), Gloo for processes
// started by hand (distribution/transports/gloo/), NCCL between GPUs (distribution/transports/nccl/). Every rank must issue the same
// collectives in the same order. The base owns what every transport needs around its data
// movement: the signature check before each collective, the deadline and its message, poisoning
// after a failure and leave(); a transport implements the collectives and exchange_signatures.
// A collective that does not complete within the group's timeout throws CollectiveError naming
// the operation and the group, instead of hanging.
#pragma once
#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/errors.h"
#include "engine/tensor.h"

namespace keras::distribution {

enum class ReduceOperation { sum, mean, max, min };
const char* reduce_operation_name(ReduceOperation operation);

// A collective failed, disagreed across ranks or timed out.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  int size() const { return size_; }
  int rank() const { return rank_; }
  // "world", or "mesh axis 'model' (group 1 of 2)" — used in error messages.
  const std::string& name() const { return name_; }
  // Whether the buffers of the collectives may live on `device` (the CPU for MPI, Gloo and
  // the local group; this process's GPU for NCCL).
  virtual bool accepts(Device device) const { return device.is_cpu(); }
  // Whether reduce_scatter moves only the blocks (a ring, as MPI's here), so that a
  // reduce_scatter and an all_gather cost one all_reduce; Gloo's is an all_reduce and a copy.
  virtual bool reduce_scatter_is_native() const { return false; }

  // In place on a contiguous float32/float64/int32/int64 buffer of `count` elements.
  virtual void all_reduce(void* data, std::int64_t count, DType dtype,
                          ReduceOperation operation) = 0;
  // receive[r * count …] = rank r's send[0 … count); receive holds size()*count elements.
  // In place when send is receive + rank() * count (this rank's block already there).
  virtual void all_gather(const void* send, void* receive, std::int64_t count, DType dtype) = 0;
  // Reduces size()*count elements across ranks and leaves block rank() (count elements) here.
  virtual void reduce_scatter(const void* send, void* receive, std::int64_t count, DType dtype,
                              ReduceOperation operation) = 0;
  virtual void broadcast(void* data, std::int64_t count, DType dtype, int root) = 0;
  // An all_reduce that work queued later on this process need not wait for until
  // wait_for_started_all_reduces(): on a GPU it runs on the communication stream while the
  // compute stream goes on (the data-parallel buckets overlap the rest of backward); `data`
  // must stay alive and unwritten until then. Elsewhere it is all_reduce, done on return.
  virtual void start_all_reduce(void* data, std::int64_t count, DType dtype,
                                ReduceOperation operation) {
    all_reduce(data, count, dtype, operation);
  }
  // Work queued from now on waits for every start_all_reduce so far.
  virtual void wait_for_started_all_reduces() {}
  virtual void barrier() = 0;
  // Processes with the same color form a new group, ordered by key (MPI_Comm_split).
  virtual std::shared_ptr<Communicator> split(int color, int key, const std::string& name) = 0;

  // The group of the same processes, in the same order, for buffers on another device: a CPU
  // group's NCCL twin (gpu_world() for world(), the NCCL split for each mesh-axis group). Held
  // weakly: whoever made the twin owns it (the runtime, the mesh-axis group cache), so that
  // finalize() can release NCCL before the groups it bootstrapped over.
  void set_device_twin(const std::shared_ptr<Communicator>& twin) { device_twin_ = twin; }
  std::shared_ptr<Communicator> device_twin() const { return device_twin_.lock(); }
  // This group, or its twin, whichever accepts(device); a ValueError naming the group and the
  // device otherwise.
  Communicator& serving(Device device, const char* what);

  // Tensor conveniences, for tensors on a device this group or its twin accepts().
  void all_reduce(Tensor& tensor, ReduceOperation operation = ReduceOperation::sum);
  Tensor all_gather(const Tensor& tensor);  // concatenated along a new leading axis
  Tensor reduce_scatter(const Tensor& tensor, ReduceOperation operation = ReduceOperation::sum);
  void broadcast(Tensor& tensor, int root = 0);

  // Whether a collective of this group failed. A failed group is poisoned: peers may still be
  // inside the failed collective, so every later call is refused at once.
  bool poisoned() const { return !failure_.empty(); }
  // The last exchange of a process that is leaving (finalize()): a "leaving" signature, which
  // every rank must issue too, so a rank still issuing collectives learns at once that this one
  // has gone (a disagreement) instead of waiting out its timeout; returns normally only when
  // all ranks leave. The wait is as long as peers may still compute (kMaximumTimeout); a peer
  // that died makes the transport fail at once. NCCL's groups leave through their host twin.
  virtual void leave();

  // Whether each collective first compares every rank's signature (on by default; off only to
  // measure what the check costs, as all_reduce_perf does). Splits inherit it.
  void set_signature_checks(bool enabled) { signature_checks_ = enabled; }
  bool signature_checks() const { return signature_checks_; }

  std::chrono::milliseconds timeout() const { return timeout_; }
  // Between 1 ms and kMaximumTimeout; anything else is a ValueError.
  void set_timeout(std::chrono::milliseconds timeout);
  // The longest deadline a collective may have: 10^6 s (11.6 days), far below the point where
  // a deadline computed as now + timeout would overflow.
  static constexpr std::chrono::milliseconds kMaximumTimeout{1'000'000'000};

 protected:
  // A group of `size` processes in which this one is `rank`; a transport knows both before it
  // connects (MPI asks its communicator, Gloo and NCCL are told).
  Communicator(std::string name, int rank, int size);
  const std::string name_;
  const int rank_;
  const int size_;

  // Every rank's signature of one collective (collective_signature.h): code, dtype, count.
  using Signature = std::array<std::int64_t, 3>;
  // The first step of every collective, before any data moves: refused on a poisoned group;
  // then, unless the group has one rank or checks are off, every rank's signature is compared
  // through the transport's exchange_signatures(), and ranks that disagree poison the group
  // with one message saying what each rank issued.
  void check_signature(std::int64_t code, DType dtype, std::int64_t count, const char* what);
  // The transport's part of check_signature: every rank's signature (3 entries a rank, in
  // rank order) where they may differ, or nullopt where the transport has learnt that they
  // agree. It throws itself where the exchange fails (a deadline, a closed connection).
  virtual std::optional<std::vector<std::int64_t>> exchange_signatures(const Signature& mine,
                                                                       const char* what) = 0;
  // What a poisoned group's refusals add after quoting the failure: what it means for this
  // transport (MPI: the process will end the whole job when it exits).
  virtual std::string poisoned_consequence() const { return ""; }
  // "all_reduce over world: the ranks disagree on the collective: ranks 0-2 issued …".
  std::string disagreement_message(const char* what, const std::vector<std::int64_t>& every) const;
  // "all_reduce over world (4 processes) did not complete within 3 s on rank 0: <why>. Set
  // KERAS_COLLECTIVE_TIMEOUT_SECONDS to wait longer." Every transport's deadline says this.
  std::string deadline_message(const char* what, const std::string& why) const;

  // Poisons the group with `message`, tells the runtime (collective_failure.h) and throws it as
  // a CollectiveError.
  [[noreturn]] void poison(const std::string& message);
  // Throws, for a poisoned group, the refusal of `what`, quoting the failure (cut short) and
  // followed by `consequence`, what the failure means for this transport.
  void refuse_if_poisoned(const char* what, const std::string& consequence = "") const;

  // KERAS_COLLECTIVE_TIMEOUT_SECONDS (0.001 to 10^6 s), default 300 s (MLX's NCCL default;
  // PyTorch uses 10 min).
  static std::chrono::milliseconds default_timeout();
  std::chrono::milliseconds timeout_ = default_timeout();

 private:
  std::weak_ptr<Communicator> device_twin_;
  std::string failure_;  // empty while usable
  bool signature_checks_ = true;
};

// The group of one process.
class LocalCommunicator : public Communicator {
 public:
  explicit LocalCommunicator(std::string name = "local");
  void all_reduce(void*, std::int64_t, DType, ReduceOperation) override {}
  void all_gather(const void* send, void* receive, std::int64_t count, DType dtype) override;
  void reduce_scatter(const void* send, void* receive, std::int64_t count, DType dtype,
                      ReduceOperation) override;
  void broadcast(void*, std::int64_t, DType, int root) override;
  void barrier() override {}
  std::shared_ptr<Communicator> split(int color, int key, const std::string& name) override;
  // Its own callers (tests, single-process code) reach the Tensor conveniences directly.
  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::broadcast;
  using Communicator::reduce_scatter;

 private:
  // One rank: there is nobody to disagree with (check_signature does not even ask).
  std::optional<std::vector<std::int64_t>> exchange_signatures(const Signature&, const char*) override {
    return std::nullopt;
  }
};

}  // namespace keras::distribution
