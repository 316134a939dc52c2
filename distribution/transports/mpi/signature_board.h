// The shared-memory side channel for collective signatures, used when every rank of a
// communicator runs on one machine: each rank owns one cache line of an MPI shared-memory
// window (MPI_Win_allocate_shared), where it publishes the signature of its k-th collective
// under the sequence number k, and reads its peers' lines. Publishing is a few stores and
// reading one cache-line transfer per peer (about 0.1 us here), where a message per peer
// through OpenMPI's point-to-point path cost about 0.2 us of a 0.5 us 1 KiB all-reduce.
//
// A line is overwritten with collective k+1 only after its owner saw every peer's signature k
// equal to its own. So a reader waiting for signature k that finds k+1 knows the owner agreed
// with it, and a seqlock (the sequence read before and after the fields) rules out torn reads
// while a non-synchronising collective (a broadcast's root) has already moved on.
#pragma once
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <vector>

namespace keras::distribution {

class SignatureBoard {
 public:
  // Collective over `communicator`, whose ranks must all share this machine's memory (the
  // caller checks with MPI_Comm_split_type). The window lives until MPI_Finalize: freeing it
  // is a synchronising collective, which a destructor on one rank must not start.
  explicit SignatureBoard(MPI_Comm communicator);

  // Publishes this rank's signature of its collective number `sequence` (1, 2, ...).
  void publish(std::int64_t sequence, const std::int64_t signature[3]);

  enum class Seen { not_yet, this_one, past_it };
  // What `peer` has published for collective `sequence`: not_yet; this_one, with `signature`
  // filled; or past_it (it already went on, so it agreed with this rank).
  Seen read(int peer, std::int64_t sequence, std::int64_t signature[3]) const;

 private:
  struct alignas(64) Line {
    std::atomic<std::int64_t> sequence{0};
    std::atomic<std::int64_t> fields[3] = {};
  };
  MPI_Win window_ = MPI_WIN_NULL;
  int rank_ = 0;
  std::vector<Line*> lines_;
};

}  // namespace keras::distribution
