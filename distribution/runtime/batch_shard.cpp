// This process's shard of the global batch (distribution/runtime/batch_shard.h).
#include "distribution/runtime/batch_shard.h"

#include "distribution/runtime/runtime.h"
#include "distribution/sharding/sharded_tensor.h"
#include "distribution/sharding/step_context.h"

namespace keras {
namespace {
thread_local const BatchShard::Rows* current_step_rows = nullptr;
}  // namespace

const BatchShard::Rows* BatchShard::step_rows() { return current_step_rows; }

BatchShard::StepScope::StepScope(Rows rows) : previous_(current_step_rows), rows_(rows) {
  current_step_rows = &rows_;
}

BatchShard::StepScope::~StepScope() { current_step_rows = previous_; }

BatchShard BatchShard::current(const char* what) {
  BatchShard context;
  context.group_ = distribution::world_pointer();
  context.world_ = context.group_;
  context.process_id_ = context.group_->rank();
  std::shared_ptr<distribution::Distribution> active = distribution::distribution();
  if (active && active->num_model_replicas() != active->device_mesh()->size() &&
      active->device_mesh()->size() != distribution::num_processes()) {
    // Every mesh device is one process: a mesh that splits more than the batch (some of its
    // devices are not whole replicas) cannot be honoured with another number of processes, and
    // running it as if it were one process per replica would silently ignore its layouts.
    throw ValueError(str(what, ": ", active->class_name(), " over ", active->device_mesh()->to_string(),
                         " has ", active->device_mesh()->size(), " devices but this job has ",
                         active->num_processes(), active->num_processes() == 1 ? " process" : " processes",
                         "; each mesh device is one process (start that many processes: `mpirun -np ",
                         active->device_mesh()->size(), "`, or by hand with initialize(job_addresses, num_processes, process_id)), or use a mesh of ", active->num_processes(),
                         " devices"));
  }
  if (!active || distribution::num_processes() == 1) return context;
  distribution::StepContext step_context;
  if (const distribution::ShardingContext* sharded = distribution::StepContext::sharding()) {
    context.sharded_layers_ = true;
    context.batch_axis_ = sharded->batch_axis;
    context.mesh_shape_ = sharded->mesh->shape();
    context.shards_ = sharded->batch_axis_size();
    context.shard_id_ = sharded->coordinates[static_cast<std::size_t>(sharded->batch_axis)];
    // A batch axis over every process (DataParallel's mesh) is the world: no group to split.
    if (context.shards_ != context.world_->size()) context.group_ = sharded->group(sharded->batch_axis);
    return context;
  }
  if (active->num_model_replicas() != active->num_processes()) {
    throw ValueError(
        str(what, ": ", active->class_name(), " over ", active->device_mesh()->to_string(),
            " has ", active->device_mesh()->size(), " devices but this job has ",
            active->num_processes(), " processes; each mesh device is one process, so the mesh "
            "must have exactly ", active->num_processes(), " devices"));
  }
  context.shards_ = active->num_data_shards();
  context.shard_id_ = active->data_shard_id();
  return context;
}

std::pair<std::int64_t, std::int64_t> BatchShard::local_rows(std::int64_t begin,
                                                                      std::int64_t end) const {
  std::int64_t count = end - begin;
  return {begin + count * shard_id_ / shards_, begin + count * (shard_id_ + 1) / shards_};
}

void BatchShard::sum(std::vector<double>& values) const {
  if (!distributed() || values.empty()) return;
  group_->all_reduce(values.data(), static_cast<std::int64_t>(values.size()), DType::float64,
                     distribution::ReduceOperation::sum);
}

bool BatchShard::any_process(bool wanted) const {
  const std::shared_ptr<distribution::Communicator>& together = sharded_layers_ ? world_ : group_;
  if (sharded_layers_ ? together->size() == 1 : !distributed()) return wanted;
  std::int64_t flag = wanted ? 1 : 0;
  together->all_reduce(&flag, 1, DType::int64, distribution::ReduceOperation::max);
  return flag != 0;
}

bool BatchShard::agreement_is_the_group() const {
  const std::shared_ptr<distribution::Communicator>& together = sharded_layers_ ? world_ : group_;
  return together && group_ && together->size() == group_->size();
}

bool BatchShard::sum_and_any_process(std::vector<double>& values, bool wanted) const {
  if (!distributed() || !agreement_is_the_group()) {
    bool any = any_process(wanted);
    sum(values);
    return any;
  }
  values.push_back(wanted ? 1.0 : 0.0);
  group_->all_reduce(values.data(), static_cast<std::int64_t>(values.size()), DType::float64,
                     distribution::ReduceOperation::sum);
  bool any = values.back() > 0.5;
  values.pop_back();
  return any;
}

std::vector<Tensor> BatchShard::variables_to_reduce(
    const std::vector<Tensor>& variables) const {
  if (!sharded_layers_) return variables;
  std::vector<Tensor> reduced;
  for (const Tensor& variable : variables) {
    std::optional<distribution::Sharding> sharding = distribution::sharding_of(variable);
    if (sharding && sharding->placement(batch_axis_).is_shard()) continue;
    reduced.push_back(variable);
  }
  return reduced;
}

bool BatchShard::layers_communicate(const std::vector<Tensor>& variables) const {
  if (!sharded_layers_) return false;
  for (std::size_t axis = 0; axis < mesh_shape_.size(); ++axis) {
    if (static_cast<int>(axis) != batch_axis_ && mesh_shape_[axis] > 1) return true;
  }
  for (const Tensor& variable : variables) {
    std::optional<distribution::Sharding> sharding = distribution::sharding_of(variable);
    if (!sharding) continue;
    for (std::size_t axis = 0; axis < mesh_shape_.size(); ++axis) {
      if (sharding->placements()[axis].is_shard() && mesh_shape_[axis] > 1) return true;
    }
  }
  return false;
}

void BatchShard::check_same(const std::vector<std::int64_t>& values,
                                     const char* what) const {
  if (world_->size() == 1) return;
  // One max-reduction of (v, -v) gives both the largest and the smallest value of each entry.
  std::size_t n = values.size();
  std::vector<std::int64_t> both(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    both[i] = values[i];
    both[n + i] = -values[i];
  }
  world_->all_reduce(both.data(), static_cast<std::int64_t>(both.size()), DType::int64,
                     distribution::ReduceOperation::max);
  std::vector<std::int64_t> low(n), high(n);
  for (std::size_t i = 0; i < n; ++i) {
    high[i] = both[i];
    low[i] = -both[n + i];
  }
  if (low != high) {
    std::string mine, range;
    for (std::size_t i = 0; i < values.size(); ++i) {
      mine += (i ? ", " : "") + std::to_string(values[i]);
      range += (i ? ", " : "") + std::string("[") + std::to_string(low[i]) + ", " +
               std::to_string(high[i]) + "]";
    }
    throw ValueError(str(what, ": the processes were given different arguments; process ",
                         process_id_, " has (", mine, ") but across processes they range over (",
                         range, "). Every process must call it with the same data sizes and "
                         "options"));
  }
}

}  // namespace keras
