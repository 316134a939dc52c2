// MPI collectives with deadlines, signature checks on a side channel, poisoning after failure
// and a watchdog on the blocking phase.
#include "distribution/transports/mpi/mpi_communicator.h"

#include "distribution/runtime/collective_signature.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <thread>

#include "distribution/runtime/collective_failure.h"
#include "distribution/runtime/half_precision_reduction.h"
#include "engine/environment.h"
#include "distribution/transports/mpi/blocking_watchdog.h"

namespace keras::distribution {
namespace {

MPI_Datatype mpi_type(DType dtype, const char* what) {
  switch (dtype) {
    case DType::float32: return MPI_FLOAT;
    case DType::float64: return MPI_DOUBLE;
    case DType::int32: return MPI_INT32_T;
    case DType::int64: return MPI_INT64_T;
    case DType::uint8: return MPI_UINT8_T;
    // 16-bit floats travel as 16-bit words; their reductions are our own (below).
    case DType::bfloat16:
    case DType::float16: return MPI_UINT16_T;
    default: break;
  }
  throw DTypeError(str(what, ": dtype ", dtype_name(dtype), " is not supported by collectives; ",
                       "expected float32, float64, int32, int64, uint8, bfloat16 or float16"));
}

// MPI's reductions know no 16-bit floats: user-defined operations that combine in float32
// (distribution/runtime/half_precision_reduction.h), made once MPI is initialized.
template <typename Half, ReduceOperation operation>
void half_reduction(void* in, void* in_out, int* length, MPI_Datatype*) {
  auto* target = static_cast<Half*>(in_out);
  half_precision::reduce(operation, target, static_cast<const Half*>(in), target,
                         static_cast<std::size_t>(*length));
}

struct HalfOperations {
  MPI_Op bfloat16[3];  // sum, max, min
  MPI_Op float16[3];
};

const HalfOperations& half_operations() {
  static const HalfOperations operations = [] {
    HalfOperations made{};
    MPI_Op_create(&half_reduction<BFloat16, ReduceOperation::sum>, 1, &made.bfloat16[0]);
    MPI_Op_create(&half_reduction<BFloat16, ReduceOperation::max>, 1, &made.bfloat16[1]);
    MPI_Op_create(&half_reduction<BFloat16, ReduceOperation::min>, 1, &made.bfloat16[2]);
    MPI_Op_create(&half_reduction<Float16, ReduceOperation::sum>, 1, &made.float16[0]);
    MPI_Op_create(&half_reduction<Float16, ReduceOperation::max>, 1, &made.float16[1]);
    MPI_Op_create(&half_reduction<Float16, ReduceOperation::min>, 1, &made.float16[2]);
    return made;
  }();
  return operations;
}

MPI_Op mpi_operation(ReduceOperation operation, DType dtype) {
  if (is_half_precision(dtype)) {
    const MPI_Op* table = dtype == DType::bfloat16 ? half_operations().bfloat16 : half_operations().float16;
    switch (operation) {
      case ReduceOperation::max: return table[1];
      case ReduceOperation::min: return table[2];
      default: return table[0];
    }
  }
  switch (operation) {
    case ReduceOperation::sum:
    case ReduceOperation::mean: return MPI_SUM;
    case ReduceOperation::max: return MPI_MAX;
    case ReduceOperation::min: return MPI_MIN;
  }
  return MPI_SUM;
}

int check_count(std::int64_t count, const char* what) {
  if (count < 0 || count > std::numeric_limits<int>::max()) {
    throw ValueError(str(what, ": element count ", count, " is outside [0, 2^31); split it"));
  }
  return static_cast<int>(count);
}

// Divides a summed buffer by the group size (mean = sum / size).
void divide(void* data, std::int64_t count, DType dtype, int size) {
  if (dispatch_half_precision(dtype, [&](auto zero) {
        half_precision::divide(static_cast<decltype(zero)*>(data), static_cast<std::size_t>(count), size);
      })) {
    return;
  }
  dispatch_numeric(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* values = static_cast<T*>(data);
    for (std::int64_t i = 0; i < count; ++i) values[i] = static_cast<T>(values[i] / static_cast<T>(size));
  });
}

int rank_in(MPI_Comm communicator) {
  int rank = 0;
  MPI_Comm_rank(communicator, &rank);
  return rank;
}

int size_of(MPI_Comm communicator) {
  int size = 1;
  MPI_Comm_size(communicator, &size);
  return size;
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm communicator, std::string name, bool owned)
    : Communicator(std::move(name), rank_in(communicator), size_of(communicator)),
      communicator_(communicator),
      owned_(owned) {
  MPI_Comm_set_errhandler(communicator_, MPI_ERRORS_RETURN);
  if (size_ == 1) return;
  // Everything below is collective, like the constructor's callers (initialize() and split()).
  // 0: all_reduce, 1: messages, 2: shared_memory; the ranks take the smallest asked for.
  int channel = size_ <= kSideChannelRanks ? 2 : 0;
  if (std::optional<std::string> asked = environment::get("KERAS_SIGNATURE_CHANNEL")) {
    if (*asked == "all_reduce") {
      channel = 0;
    } else if (*asked == "messages") {
      channel = 1;
    } else if (*asked == "shared_memory") {
      channel = 2;
    } else {
      throw ValueError(str("KERAS_SIGNATURE_CHANNEL=", quote_input(*asked),
                           " is not a signature channel; expected shared_memory, messages or all_reduce"));
    }
  }
  MPI_Comm machine;
  MPI_Comm_split_type(communicator_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &machine);
  int machine_size = 0;
  MPI_Comm_size(machine, &machine_size);
  if (channel == 2 && machine_size != size_) channel = 1;  // not all on one machine
  MPI_Allreduce(MPI_IN_PLACE, &channel, 1, MPI_INT, MPI_MIN, communicator_);
  if (channel == 2) {
    board_ = std::make_unique<SignatureBoard>(machine);
  } else if (channel == 1) {
    MPI_Comm_dup(communicator_, &side_channel_);
    MPI_Comm_set_errhandler(side_channel_, MPI_ERRORS_RETURN);
  }
  MPI_Comm_free(&machine);
}

MpiCommunicator::~MpiCommunicator() {
  if (exchange_abandoned_) {
    // A peer may still complete the abandoned exchange and write into these buffers, and the
    // MPI communicator still has that request pending: keep both alive until the job ends.
    (void)buffers_.release();
    return;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (side_channel_ != MPI_COMM_NULL) MPI_Comm_free(&side_channel_);
  if (owned_) MPI_Comm_free(&communicator_);
}

void MpiCommunicator::fail(const std::string& message, bool exchange_abandoned) {
  exchange_abandoned_ = exchange_abandoned_ || exchange_abandoned;
  poison(message);
}

std::string MpiCommunicator::poisoned_consequence() const {
  return ". Other processes may still be inside the failed collective, so when this process "
         "exits it ends the whole job instead of finalizing normally";
}

void MpiCommunicator::check(int status, const char* what) {
  if (status == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, message, &length);
  fail(str(what, " over ", name_, " failed on rank ", rank_, ": ",
           std::string(message, static_cast<std::size_t>(length))),
       /*exchange_abandoned=*/true);
}

void MpiCommunicator::wait(MPI_Request& request, const char* what) {
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  int done = 0;
  // Poll without sleeping: a sleeping rank delays the others by its sleep (with 50 us sleeps the
  // signature check cost 10-20% of a 16 MiB all-reduce). After the first spins, yield between
  // polls so that oversubscribed ranks (4 processes on 2 cores in CI) still let the others run.
  for (int spins = 0; !done; ++spins) {
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done) break;
    if (spins > 1000) std::this_thread::yield();
    if (std::chrono::steady_clock::now() > deadline) {
      fail(deadline_message(what, "another rank has not joined it (it failed, stopped, or issued "
                                  "collectives in a different order)"),
           /*exchange_abandoned=*/true);
    }
  }
}

std::vector<std::int64_t> MpiCommunicator::gather_every_signature(const Signature& mine,
                                                                  const char* what) {
  // Every rank saw the same disagreement (the max/min reduction gives all of them the same
  // result), so every rank takes part in this second exchange.
  std::vector<std::int64_t>& all = buffers_->every_signature;
  all.assign(static_cast<std::size_t>(size_) * 3, 0);
  std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(rank_) * 3);
  MPI_Request request;
  check(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all.data(), 3, MPI_INT64_T,
                       communicator_, &request),
        what);
  wait(request, what);
  return all;
}

std::optional<std::vector<std::int64_t>> MpiCommunicator::exchange_signatures(const Signature& mine,
                                                                              const char* what) {
  if (board_ || side_channel_ != MPI_COMM_NULL) {
    // Raises itself on a disagreement: the exchange may be abandoned half way.
    post_signature(mine[0], static_cast<DType>(mine[1]), mine[2], what);
    await_signatures(what);
    return std::nullopt;
  }
  std::int64_t* signature = buffers_->signature;
  for (int k = 0; k < 3; ++k) {
    signature[k] = mine[static_cast<std::size_t>(k)];
    signature[3 + k] = -mine[static_cast<std::size_t>(k)];
  }
  MPI_Request request;
  check(MPI_Iallreduce(MPI_IN_PLACE, signature, 6, MPI_INT64_T, MPI_MAX, communicator_, &request),
        what);
  wait(request, what);
  bool agree = signature[0] == -signature[3] && signature[1] == -signature[4] &&
               signature[2] == -signature[5];
  if (agree) return std::nullopt;
  return gather_every_signature(mine, what);
}

void MpiCommunicator::post_signature(std::int64_t code, DType dtype, std::int64_t count,
                                     const char* what) {
  ExchangeBuffers& buffers = *buffers_;
  buffers.mine[0] = code;
  buffers.mine[1] = static_cast<std::int64_t>(dtype);
  buffers.mine[2] = count;
  buffers.every_signature.assign(static_cast<std::size_t>(size_) * 3, 0);
  std::memcpy(&buffers.every_signature[static_cast<std::size_t>(rank_) * 3], buffers.mine, sizeof buffers.mine);
  ++sequence_;
  if (board_) {
    board_->publish(sequence_, buffers.mine);
    return;
  }
  buffers.receives.assign(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
  buffers.sends.assign(static_cast<std::size_t>(size_ - 1), MPI_REQUEST_NULL);
  // Messages between two ranks on one communicator and tag arrive in order (MPI's
  // non-overtaking rule), so the k-th signature received from a peer is its k-th collective.
  for (int peer = 0, sent = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    check(MPI_Irecv(&buffers.every_signature[static_cast<std::size_t>(peer) * 3], 3, MPI_INT64_T, peer, 0,
                    side_channel_, &buffers.receives[static_cast<std::size_t>(peer)]),
          what);
    check(MPI_Isend(buffers.mine, 3, MPI_INT64_T, peer, 0, side_channel_,
                    &buffers.sends[static_cast<std::size_t>(sent++)]),
          what);
  }
}

void MpiCommunicator::fail_disagreement(const char* what, bool exchange_abandoned) {
  fail(disagreement_message(what, buffers_->every_signature), exchange_abandoned);
}

void MpiCommunicator::await_signatures(const char* what) {
  ExchangeBuffers& buffers = *buffers_;
  // The clock is first read after a few polls, and then every 16: at 1 KiB an all-reduce takes
  // about 0.5 us, and reading the clock at every poll cost 6% of it (perf).
  using Clock = std::chrono::steady_clock;
  Clock::time_point deadline = Clock::time_point::max();
  auto signature_of = [&](int peer) { return &buffers.every_signature[static_cast<std::size_t>(peer) * 3]; };
  std::vector<char>& arrived = buffers.arrived;
  arrived.assign(static_cast<std::size_t>(size_), 0);
  arrived[static_cast<std::size_t>(rank_)] = 1;
  // Whether `peer`'s signature is here now (then in every_signature).
  auto poll = [&](int peer) -> bool {
    if (board_) {
      switch (board_->read(peer, sequence_, signature_of(peer))) {
        case SignatureBoard::Seen::not_yet: return false;
        case SignatureBoard::Seen::this_one: return true;
        case SignatureBoard::Seen::past_it:
          std::memcpy(signature_of(peer), buffers.mine, sizeof buffers.mine);
          return true;
      }
    }
    int done = 0;
    check(MPI_Test(&buffers.receives[static_cast<std::size_t>(peer)], &done, MPI_STATUS_IGNORE), what);
    return done != 0;
  };
  int missing = size_ - 1;
  bool disagree = false;
  Clock::time_point give_up = deadline;
  bool disagreement_timed = false;
  // Poll without sleeping, as wait() does, yielding after the first spins for oversubscribed
  // ranks.
  for (int spins = 0;; ++spins) {
    for (int peer = 0; peer < size_ && missing > 0; ++peer) {
      if (arrived[static_cast<std::size_t>(peer)] || !poll(peer)) continue;
      arrived[static_cast<std::size_t>(peer)] = 1;
      --missing;
      if (std::memcmp(signature_of(peer), buffers.mine, sizeof buffers.mine) != 0) disagree = true;
    }
    // Sends may still be pending towards ranks that have not arrived: the exchange is abandoned.
    if (disagree && missing == 0) fail_disagreement(what, /*exchange_abandoned=*/true);
    if (missing == 0) {
      if (board_) return;
      int sent = 0;
      // The sends are small and eager; they complete once their peers' receives did.
      check(MPI_Testall(static_cast<int>(buffers.sends.size()), buffers.sends.data(), &sent,
                        MPI_STATUSES_IGNORE),
            what);
      if (sent) return;
    }
    if (spins > 1000) std::this_thread::yield();
    if ((spins & 15) != 15) continue;
    Clock::time_point now = Clock::now();
    if (deadline == Clock::time_point::max()) give_up = deadline = now + timeout_;
    if (disagree && !disagreement_timed) {
      // Wait a moment longer for the others, so the message says what every rank issued.
      give_up = std::min(deadline, now + std::chrono::seconds(1));
      disagreement_timed = true;
    }
    if (now > give_up) {
      if (disagree) fail_disagreement(what, /*exchange_abandoned=*/true);
      std::string absent;
      for (int peer = 0; peer < size_; ++peer) {
        if (!arrived[static_cast<std::size_t>(peer)]) absent += str(absent.empty() ? "" : ", ", peer);
      }
      fail(deadline_message(
               what, absent.empty() ? str("its signature messages to the other ranks were never received")
                                    : str("rank(s) ", absent, " have not joined it (failed, stopped, or issued ",
                                          "collectives in a different order)")),
           /*exchange_abandoned=*/true);
    }
  }
}

void MpiCommunicator::all_reduce(void* data, std::int64_t count, DType dtype,
                                 ReduceOperation operation) {
  const char* what = "all_reduce";
  int n = check_count(count, what);
  MPI_Datatype type = mpi_type(dtype, what);
  check_signature(collective_code(CollectiveKind::all_reduce, static_cast<int>(operation)), dtype, count,
                  what);
  {
    BlockingCallWatch watch(what, &name_, timeout_);
    check(MPI_Allreduce(MPI_IN_PLACE, data, n, type, mpi_operation(operation, dtype), communicator_),
          what);
  }
  if (operation == ReduceOperation::mean) divide(data, count, dtype, size_);
}

void MpiCommunicator::all_gather(const void* send, void* receive, std::int64_t count,
                                 DType dtype) {
  const char* what = "all_gather";
  int n = check_count(count, what);
  MPI_Datatype type = mpi_type(dtype, what);
  check_signature(collective_code(CollectiveKind::all_gather), dtype, count, what);
  const std::size_t block_bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  char* blocks = static_cast<char*>(receive);
  const bool in_place = send == blocks + static_cast<std::size_t>(rank_) * block_bytes;
  BlockingCallWatch watch(what, &name_, timeout_);
  if (block_bytes * static_cast<std::size_t>(size_) < kRingBytes) {
    check(MPI_Allgather(in_place ? MPI_IN_PLACE : send, n, type, receive, n, type, communicator_), what);
    return;
  }
  if (!in_place) std::memcpy(blocks + static_cast<std::size_t>(rank_) * block_bytes, send, block_bytes);
  // Ring: at step s this rank passes block (rank - s) on to the next rank and takes block
  // (rank - s - 1) from the previous one, straight into place.
  const int next = (rank_ + 1) % size_, previous = (rank_ + size_ - 1) % size_;
  for (int step = 0; step + 1 < size_; ++step) {
    auto block = [&](int offset) {
      return blocks + static_cast<std::size_t>((rank_ - offset + 2 * size_) % size_) * block_bytes;
    };
    check(MPI_Sendrecv(block(step), n, type, next, kRingTag, block(step + 1), n, type, previous,
                       kRingTag, communicator_, MPI_STATUS_IGNORE),
          what);
  }
}

void MpiCommunicator::reduce_scatter(const void* send, void* receive, std::int64_t count,
                                     DType dtype, ReduceOperation operation) {
  const char* what = "reduce_scatter";
  int n = check_count(count, what);
  MPI_Datatype type = mpi_type(dtype, what);
  check_signature(collective_code(CollectiveKind::reduce_scatter, static_cast<int>(operation)), dtype, count,
                  what);
  const std::size_t block_bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  if (size_ == 1) {
    if (send != receive) std::memcpy(receive, send, block_bytes);
  } else if (block_bytes * static_cast<std::size_t>(size_) < kRingBytes) {
    BlockingCallWatch watch(what, &name_, timeout_);
    check(MPI_Reduce_scatter_block(send, receive, n, type, mpi_operation(operation, dtype),
                                   communicator_),
          what);
  } else {
    // Ring: at step s this rank sends its running sum of block (rank - s - 1) to the next rank
    // and receives the previous rank's sum of block (rank - s - 2), adding its own part; after
    // size - 1 steps the sum arriving is of block rank, complete. The running sums live in
    // `receive` and one scratch block.
    const char* blocks = static_cast<const char*>(send);
    auto block = [&](int offset) {
      return blocks + static_cast<std::size_t>((rank_ - offset + 2 * size_) % size_) * block_bytes;
    };
    std::vector<char>& incoming = buffers_->ring_scratch;
    if (incoming.size() < block_bytes) incoming.resize(block_bytes);
    const int next = (rank_ + 1) % size_, previous = (rank_ + size_ - 1) % size_;
    BlockingCallWatch watch(what, &name_, timeout_);
    for (int step = 0; step + 1 < size_; ++step) {
      const void* outgoing = step == 0 ? block(1) : receive;
      check(MPI_Sendrecv(outgoing, n, type, next, kRingTag, incoming.data(), n, type, previous,
                         kRingTag, communicator_, MPI_STATUS_IGNORE),
            what);
      // receive = own part of the arriving block + the sum that arrived (MPI's own reduction
      // kernels; the order of the terms is the same on every rank for a given block).
      std::memcpy(receive, block(step + 2), block_bytes);
      check(MPI_Reduce_local(incoming.data(), receive, n, type, mpi_operation(operation, dtype)), what);
    }
  }
  if (operation == ReduceOperation::mean) divide(receive, count, dtype, size_);
}

void MpiCommunicator::broadcast(void* data, std::int64_t count, DType dtype, int root) {
  const char* what = "broadcast";
  if (root < 0 || root >= size_) {
    throw ValueError(str("broadcast over ", name_, ": root ", root, " is not a rank in [0, ",
                         size_, ")"));
  }
  int n = check_count(count, what);
  MPI_Datatype type = mpi_type(dtype, what);
  check_signature(collective_code(CollectiveKind::broadcast, root), dtype, count, what);
  BlockingCallWatch watch(what, &name_, timeout_);
  check(MPI_Bcast(data, n, type, root, communicator_), what);
}

void MpiCommunicator::barrier() {
  const char* what = "barrier";
  check_signature(collective_code(CollectiveKind::barrier), DType::int32, 0, what);
  MPI_Request request;
  check(MPI_Ibarrier(communicator_, &request), what);
  wait(request, what);
}

std::shared_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& name) {
  const char* what = "split";
  check_signature(collective_code(CollectiveKind::split), DType::int32, 0, what);
  MPI_Comm child;
  // MPI_Comm_split has no non-blocking form; the signature exchange above already proved that
  // every rank reached this point, and the watchdog bounds the rest.
  {
    BlockingCallWatch watch(what, &name_, timeout_);
    check(MPI_Comm_split(communicator_, color, key, &child), what);
  }
  auto result = std::make_shared<MpiCommunicator>(child, name, /*owned=*/true);
  result->set_timeout(timeout_);
  result->set_signature_checks(signature_checks());
  return result;
}

}  // namespace keras::distribution
