// The shared-memory signature board (see the header).
#include "distribution/transports/mpi/signature_board.h"

#include <cstdint>
#include <new>

#include "engine/errors.h"

namespace keras::distribution {

SignatureBoard::SignatureBoard(MPI_Comm communicator) {
  int size = 0;
  MPI_Comm_size(communicator, &size);
  MPI_Comm_rank(communicator, &rank_);
  MPI_Info info;
  MPI_Info_create(&info);
  // Each rank's segment on its own pages: no two ranks' lines share a cache line.
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  void* base = nullptr;
  // Room to round each segment's start up to a cache line: MPI aligns it less (UBSan saw a
  // segment at ...108).
  int status = MPI_Win_allocate_shared(static_cast<MPI_Aint>(sizeof(Line) + alignof(Line)), 1, info,
                                       communicator, &base, &window_);
  MPI_Info_free(&info);
  if (status != MPI_SUCCESS) {
    throw Error(str("MPI_Win_allocate_shared failed (status ", status, ") for the signature board"));
  }
  auto aligned = [](void* segment) {
    auto address = reinterpret_cast<std::uintptr_t>(segment);
    return reinterpret_cast<Line*>((address + alignof(Line) - 1) / alignof(Line) * alignof(Line));
  };
  new (aligned(base)) Line();
  lines_.resize(static_cast<std::size_t>(size), nullptr);
  for (int peer = 0; peer < size; ++peer) {
    MPI_Aint bytes = 0;
    int unit = 0;
    void* line = nullptr;
    MPI_Win_shared_query(window_, peer, &bytes, &unit, &line);
    lines_[static_cast<std::size_t>(peer)] = aligned(line);
  }
  // Every line is constructed before anyone reads one.
  MPI_Barrier(communicator);
}

void SignatureBoard::publish(std::int64_t sequence, const std::int64_t signature[3]) {
  Line& line = *lines_[static_cast<std::size_t>(rank_)];
  // Seqlock write: an odd value marks the fields as changing (sequences are stored doubled).
  line.sequence.store(2 * sequence - 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  for (int k = 0; k < 3; ++k) line.fields[k].store(signature[k], std::memory_order_relaxed);
  line.sequence.store(2 * sequence, std::memory_order_release);
}

SignatureBoard::Seen SignatureBoard::read(int peer, std::int64_t sequence, std::int64_t signature[3]) const {
  const Line& line = *lines_[static_cast<std::size_t>(peer)];
  std::int64_t before = line.sequence.load(std::memory_order_acquire);
  if (before > 2 * sequence) return Seen::past_it;
  if (before < 2 * sequence) return Seen::not_yet;
  for (int k = 0; k < 3; ++k) signature[k] = line.fields[k].load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  std::int64_t after = line.sequence.load(std::memory_order_relaxed);
  if (after == before) return Seen::this_one;
  return after > 2 * sequence ? Seen::past_it : Seen::not_yet;
}

}  // namespace keras::distribution
