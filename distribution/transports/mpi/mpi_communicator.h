// Communicator over an MPI communicator (OpenMPI). Every collective carries its signature
// (operation, dtype, element count) to every peer on a side channel before any data moves: a
// shared-memory board (signature_board.h) when all ranks share one machine, one message per
// peer on a private duplicate communicator otherwise, and one tiny all-reduce for groups spread
// over machines of more than kSideChannelRanks processes. KERAS_SIGNATURE_CHANNEL=
// shared_memory|messages|all_reduce picks one (the ranks take the most widely available of what
// each asked for). The base class turns the signatures into errors that name the missing or
// disagreeing ranks instead of a hang.
//
// Once every peer's signature has arrived the data move with the blocking collective, bounded
// by a watchdog (blocking_watchdog.h): OpenMPI's non-blocking ones were 2-6x slower here
// (README, "Measured", has the numbers behind each of these choices).
//
// Failure is final: the exchange buffers of an abandoned exchange live on the heap, owned by
// the communicator, and are deliberately never freed, so a late peer completing it writes into
// live memory; finalize() then ends the whole job (MPI_Abort).
#pragma once
#include <mpi.h>

#include <memory>
#include <vector>

#include "distribution/runtime/communicator.h"
#include "distribution/transports/mpi/signature_board.h"

namespace keras::distribution {

class MpiCommunicator : public Communicator {
 public:
  // Wraps `communicator`; frees it on destruction when `owned`.
  MpiCommunicator(MPI_Comm communicator, std::string name, bool owned);
  ~MpiCommunicator() override;

  void all_reduce(void* data, std::int64_t count, DType dtype, ReduceOperation operation) override;
  void all_gather(const void* send, void* receive, std::int64_t count, DType dtype) override;
  bool reduce_scatter_is_native() const override { return true; }
  void reduce_scatter(const void* send, void* receive, std::int64_t count, DType dtype,
                      ReduceOperation operation) override;
  void broadcast(void* data, std::int64_t count, DType dtype, int root) override;
  void barrier() override;
  std::shared_ptr<Communicator> split(int color, int key, const std::string& name) override;

  // (Signature checks, set_signature_checks, cost one 24-byte message per peer per
  // collective; without them a missing rank blocks the others until the watchdog ends the
  // process.)
  MPI_Comm handle() const { return communicator_; }

 private:
  // Heap buffers of the non-blocking exchanges; see the file comment for their lifetime.
  struct ExchangeBuffers {
    std::int64_t signature[6] = {};
    std::int64_t mine[3] = {};
    std::vector<std::int64_t> every_signature;  // 3 per rank
    std::vector<char> arrived;                   // per rank, during await_signatures
    std::vector<MPI_Request> receives;           // one per rank (MPI_REQUEST_NULL for this one)
    std::vector<MPI_Request> sends;              // one per peer
    std::vector<char> ring_scratch;              // one block of a ring reduce_scatter
  };

  // all_gather and reduce_scatter of at least this many bytes in all go round a ring of
  // MPI_Sendrecv, which moves each byte once: OpenMPI 4.1's MPI_Reduce_scatter_block followed
  // by MPI_Allgather took 2.1-2.5 ms for 3.2 MB on 2 processes here, where the ring's pair took
  // 1.25-1.74 ms, as long as MPI_Allreduce of the whole (1.16-1.77 ms). Below it, MPI's own
  // (latency-bound) algorithms.
  static constexpr std::size_t kRingBytes = 64 << 10;
  static constexpr int kRingTag = 7;

  static constexpr int kSideChannelRanks = 16;

  // The side channel's exchange, or the max/min reduction of every signature (then, where
  // they differ, an all-gather of them); see the file comment.
  std::optional<std::vector<std::int64_t>> exchange_signatures(const Signature& mine,
                                                               const char* what) override;
  std::string poisoned_consequence() const override;
  // Sends this rank's signature to every peer and posts the receives of theirs.
  void post_signature(std::int64_t operation_code, DType dtype, std::int64_t count, const char* what);
  // Polls the posted signatures until every peer's has arrived: raises on a disagreement as
  // soon as one is seen, on the deadline naming the ranks that have not arrived, and on an MPI
  // error.
  void await_signatures(const char* what);
  [[noreturn]] void fail_disagreement(const char* what, bool exchange_abandoned);

  // Waits for `request` with this group's deadline; `what` names it in the error.
  void wait(MPI_Request& request, const char* what);
  void check(int status, const char* what);
  // Marks the communicator failed (and the process, for finalize) and throws `message`.
  [[noreturn]] void fail(const std::string& message, bool exchange_abandoned);
  // Every rank's signature (3 entries a rank), gathered.
  std::vector<std::int64_t> gather_every_signature(const Signature& mine, const char* what);

  MPI_Comm communicator_;
  MPI_Comm side_channel_ = MPI_COMM_NULL;  // signature messages; null unless that channel
  std::unique_ptr<SignatureBoard> board_;  // the shared-memory channel, when all ranks are local
  std::int64_t sequence_ = 0;              // collectives issued on this communicator
  bool owned_;
  std::unique_ptr<ExchangeBuffers> buffers_ = std::make_unique<ExchangeBuffers>();
  bool exchange_abandoned_ = false;
};

}  // namespace keras::distribution
