// How the trainer runs under the global Distribution: which rows of each global batch this
// process computes on, and how per-process sums (loss, metrics, gradients) become global ones.
// Without a distribution, or with one process, it is the identity and costs nothing.
// Under DataParallel every process is a data shard and the group is the world. Under
// ModelParallel the data shards are the batch axis of the mesh: a process reads the shard of
// its coordinate on that axis, sums run over the batch-axis group (the processes along the
// other axes hold the same rows and compute the same loss), and only variables replicated
// over the batch axis have their gradients reduced there (one sharded over it gets its summed
// gradient from the gather that assembled it, see distribution/sharded_tensor.h).
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
  // Whether the layers communicate during the step (a mesh axis besides the batch one holds
  // several processes, or a variable is split): the gradient reducer then neither overlaps
  // the backward pass (the layers' own collectives run in it) nor updates by blocks (the
  // replicated variables' optimizer state is saved through the layouts' gathers).
  bool layers_communicate(const std::vector<Tensor>& variables) const;
  // The variables whose gradients the trainer sums over group() (all of them but those a
  // layout splits over the batch axis: the gather that assembled them sums their gradient).
  std::vector<Tensor> variables_to_reduce(const std::vector<Tensor>& variables) const;
  // The rows [begin, end) of this process within global rows [begin, end).
  std::pair<std::int64_t, std::int64_t> local_rows(std::int64_t begin, std::int64_t end) const;
  // Sums values across the data-parallel group (in place).
  void sum(std::vector<double>& values) const;
  // Whether `wanted` holds on any process whose steps depend on this one's: every process of
  // the mesh under ModelParallel (its model-axis collectives tie them all together), the
  // data-parallel group otherwise, this process alone without a distribution. Where they must
  // decide together (when to read the logs) or fail together, they agree through this: one
  // 8-byte all-reduce on the host, which waits for no device.
  bool any_process(bool wanted) const;
  // Throws unless every process passed the same values (e.g. dataset size, batch size).
  void check_same(const std::vector<std::int64_t>& values, const char* what) const;
  // Only process 0 prints progress.
  bool prints() const { return process_id_ == 0; }

 private:
  std::int64_t shards_ = 1;
  std::int64_t shard_id_ = 0;
  int process_id_ = 0;
  bool sharded_layers_ = false;  // a ShardingContext is engaged
  std::vector<std::int64_t> mesh_shape_;
  int batch_axis_ = 0;
  std::shared_ptr<distribution::Communicator> group_;
  std::shared_ptr<distribution::Communicator> world_;
};

}  // namespace keras
