// This process's shard of the global batch, under the global Distribution (DataParallel or
// ModelParallel alike: the batch axis is a mesh axis like any other): which rows of each
// global batch this process holds, and how per-process sums (loss, metrics, gradients) become
// global ones. Without a distribution, or with one process, it is the identity and costs
// nothing. The data shards are the batch axis of the mesh (every process under DataParallel): a process reads the shard of
// its coordinate on that axis, sums run over the batch-axis group (the processes along the
// other axes hold the same rows and compute the same loss), and only variables replicated
// over the batch axis have their gradients reduced there (one sharded over it gets its summed
// gradient from the gather that assembled it, see distribution/sharding/sharded_tensor.h).
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

#include "distribution/runtime/communicator.h"
#include "distribution/api/distribution.h"

namespace keras {

class BatchShard {
 public:
  // Reads distribution(); a ValueError (naming `what`) for a mesh this job cannot run: one
  // that splits more than the batch over a number of devices other than the processes.
  static BatchShard current(const char* what);

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
  // Whether any_process's processes are the data-parallel group's (pure data parallelism, or
  // a mesh with nothing but the batch axis): a flag may then ride that group's sums.
  bool agreement_is_the_group() const;
  // sum(values) and any_process(wanted) in one all-reduce where agreement_is_the_group(),
  // in two otherwise.
  bool sum_and_any_process(std::vector<double>& values, bool wanted) const;
  // Throws unless every process passed the same values (e.g. dataset size, batch size).
  void check_same(const std::vector<std::int64_t>& values, const char* what) const;
  // Only process 0 prints progress.
  bool prints() const { return process_id_ == 0; }

  // Where this process's rows sit in the global batch of the current step. The trainer sets
  // it (StepScope); random layers (Dropout) then draw, for each global row, exactly the numbers
  // one process would draw for it, through the counter-based RNG's slices, so that a model
  // with dropout keeps the same weights as on one process.
  struct Rows {
    std::int64_t total = 0;   // rows of the global batch
    std::int64_t offset = 0;  // index of this process's first row in it
    std::int64_t local = 0;   // rows this process holds
  };
  // The rows of the current step on this thread, or null outside distributed training.
  static const Rows* step_rows();
  class StepScope {
   public:
    explicit StepScope(Rows rows);
    ~StepScope();
    StepScope(const StepScope&) = delete;
    StepScope& operator=(const StepScope&) = delete;

   private:
    const Rows* previous_;
    Rows rows_;
  };

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
