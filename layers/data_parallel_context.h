// How the trainer runs under the global Distribution: which rows of each global batch this
// process computes on, and how per-process sums (loss, metrics, gradients) become global ones.
// Without a distribution, or with one process, it is the identity and costs nothing.
//
// Batch rule (applied identically on every process, so no process waits for another):
// the global batch_size must be divisible by the number of data shards (an error otherwise);
// the last, partial batch of a dataset is split as evenly as possible (shards differ by at most
// one row, a shard may be empty). Each process scales its mean loss by local_rows/global_rows
// and the gradients are summed, which gives exactly the gradient of the mean over the global
// batch, whatever the split.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "distribution/communicator.h"
#include "distribution/distribution.h"

namespace keras {

class DataParallelContext {
 public:
  // Reads distribution(); throws NotImplementedError for layouts the layers cannot run yet.
  static DataParallelContext current(const char* what);

  bool distributed() const { return shards_ > 1; }
  std::int64_t shards() const { return shards_; }
  std::int64_t shard_id() const { return shard_id_; }
  const std::shared_ptr<distribution::Communicator>& group() const { return group_; }
  // The rows [begin, end) of this process within global rows [begin, end).
  std::pair<std::int64_t, std::int64_t> local_rows(std::int64_t begin, std::int64_t end) const;
  // Sums values across the data-parallel group (in place).
  void sum(std::vector<double>& values) const;
  // Throws unless every process passed the same values (e.g. dataset size, batch size).
  void check_same(const std::vector<std::int64_t>& values, const char* what) const;
  // Only process 0 prints progress.
  bool prints() const { return process_id_ == 0; }

 private:
  std::int64_t shards_ = 1;
  std::int64_t shard_id_ = 0;
  int process_id_ = 0;
  std::shared_ptr<distribution::Communicator> group_;
};

}  // namespace keras
