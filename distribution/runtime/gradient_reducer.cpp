// Bucketed gradient all-reduce.
#include "distribution/runtime/gradient_reducer.h"

#include "distribution/runtime/collective_log.h"
#include "distribution/runtime/runtime.h"
#include "engine/backend.h"

#include <chrono>
#include <algorithm>
#include <cstring>


namespace keras::distribution {

GradientReducer::GradientReducer(std::shared_ptr<Communicator> group,
                                 std::vector<Tensor> variables, BucketOptions options, bool overlap,
                                 bool shard_updates)
    : group_(std::move(group)), overlap_(overlap), variables_(std::move(variables)) {
  if (!group_) throw ValueError("GradientReducer: the process group is null");
  Device device = variables_.empty() ? Device::cpu() : variables_.front().device();
  for (const Tensor& variable : variables_) {
    if (variable.device() != device) {
      throw ValueError(str("data-parallel gradients on several devices (", device.to_string(),
                           " and ", variable.device().to_string(), " for '", variable.name(),
                           "'); create every variable on one device"));
    }
  }
  // The buckets live on the variables' device and are reduced by the group that serves it:
  // on a GPU, the host group's NCCL twin (Communicator::device_twin).
  if (!group_->accepts(device)) {
    group_->serving(device, "data-parallel gradient all_reduce");  // throws, saying why
    device_twin_ = group_->device_twin();
    reduces_on_twin_ = true;
  }
  bucket_of_.resize(variables_.size());
  received_.assign(variables_.size(), false);
  std::size_t cap = options.first_bucket_bytes;
  for (std::size_t position = variables_.size(); position-- > 0;) {
    const Tensor& variable = variables_[position];
    index_of_[variable.impl()] = position;
    std::size_t bytes = variable.nbytes();
    if (bytes >= options.in_place_bytes) {
      bucket_of_[position] = kInPlace;
      if (shard_updates && !reduces_on_twin_ && group_->reduce_scatter_is_native() &&
          group_->size() > 1 && is_floating(variable.dtype()) &&
          variable.size() % group_->size() == 0) {
        block_updated_.push_back(position);
        owned_gradient_blocks_.push_back(
            Tensor::empty({variable.size() / group_->size()}, variable.dtype(), device));
      } else {
        in_place_.push_back(position);
      }
      continue;
    }
    bool new_bucket = buckets_.empty() || buckets_.back().buffer.dtype() != variable.dtype();
    if (!new_bucket) {
      const Bucket& last = buckets_.back();
      std::size_t used = static_cast<std::size_t>(last.buffer.size()) * dtype_size(last.buffer.dtype());
      new_bucket = used > 0 && used + bytes > cap;
    }
    if (new_bucket) {
      if (!buckets_.empty()) cap = options.bucket_cap_bytes;
      Bucket bucket;
      bucket.buffer = Tensor::empty({0}, variable.dtype(), device);
      buckets_.push_back(std::move(bucket));
    }
    Bucket& bucket = buckets_.back();
    bucket.offsets.push_back(bucket.buffer.size());
    bucket.members.push_back(position);
    bucket.buffer = Tensor::empty({bucket.buffer.size() + variable.size()}, variable.dtype(), device);
    bucket_of_[position] = buckets_.size() - 1;
  }
  // The same model on every rank gives the same buckets; check it once with a verified
  // collective, so a mismatch is an error now rather than a hang or garbage later.
  std::int64_t layout[2] = {static_cast<std::int64_t>(buckets_.size() + in_place_.size()), 0};
  for (const Bucket& bucket : buckets_) layout[1] += bucket.buffer.size();
  for (std::size_t position : in_place_) layout[1] += variables_[position].size();
  layout[0] += static_cast<std::int64_t>(block_updated_.size());
  for (std::size_t position : block_updated_) layout[1] += variables_[position].size();
  std::int64_t low[2] = {layout[0], layout[1]}, high[2] = {layout[0], layout[1]};
  group_->all_reduce(low, 2, DType::int64, ReduceOperation::min);
  group_->all_reduce(high, 2, DType::int64, ReduceOperation::max);
  if (low[0] != high[0] || low[1] != high[1]) {
    throw CollectiveError(str("data-parallel gradients differ across processes: this process has ",
                              layout[1], " gradient elements in ", layout[0], " buckets, others "
                              "have between ", low[1], " and ", high[1],
                              "; every process must build the same model"));
  }
}

GradientReducer::~GradientReducer() = default;

Communicator& GradientReducer::reduce_group() const {
  if (!reduces_on_twin_) return *group_;
  std::shared_ptr<Communicator> twin = device_twin_.lock();
  if (!twin) {
    throw CollectiveError(str("the GPU group of '", group_->name(), "' that reduced these ",
                              "gradients is gone (finalize() ran, or the groups were made again)"));
  }
  return *twin;  // kept alive by its owner for the call: nothing here releases it
}

bool GradientReducer::serves(const std::shared_ptr<Communicator>& group,
                             const std::vector<Tensor>& variables) const {
  if (group.get() != group_.get()) return false;
  if (reduces_on_twin_ && device_twin_.lock() != group_->device_twin()) return false;
  if (variables.size() != variables_.size()) return false;
  for (std::size_t i = 0; i < variables.size(); ++i) {
    if (!variables[i].same_as(variables_[i])) return false;
  }
  return true;
}

void GradientReducer::start(Bucket& bucket) {
  bucket.started = true;
  auto begin = std::chrono::steady_clock::now();
  CollectiveLog::record("all_reduce", group_->name(), static_cast<std::int64_t>(bucket.buffer.nbytes()));
  if (overlap_) {
    reduce_group().start_all_reduce(bucket.buffer.raw_data(), bucket.buffer.size(),
                                    bucket.buffer.dtype(), ReduceOperation::sum);
  } else {
    reduce_group().all_reduce(bucket.buffer.raw_data(), bucket.buffer.size(),
                              bucket.buffer.dtype(), ReduceOperation::sum);
  }
  communication_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

void GradientReducer::start_ready_buckets() {
  while (next_to_start_ < buckets_.size()) {
    Bucket& bucket = buckets_[next_to_start_];
    if (bucket.ready < bucket.members.size()) break;
    start(bucket);
    ++next_to_start_;
  }
}

void GradientReducer::gradient_ready(const Tensor& variable) {
  auto found = index_of_.find(variable.impl());
  if (found == index_of_.end()) return;  // not one of ours (e.g. not trainable)
  std::size_t position = found->second;
  if (received_[position]) return;
  received_[position] = true;
  if (bucket_of_[position] == kInPlace) return;  // reduced in place by finish()
  Bucket& bucket = buckets_[bucket_of_[position]];
  std::size_t member = 0;
  while (bucket.members[member] != position) ++member;
  Tensor gradient = variable.grad();
  if (gradient.device().is_cpu()) {
    std::memcpy(static_cast<char*>(bucket.buffer.raw_data()) +
                    bucket.offsets[member] * dtype_size(bucket.buffer.dtype()),
                gradient.raw_data(), gradient.nbytes());
  } else {  // on the device's compute stream, ahead of the bucket's all-reduce
    backend_for(gradient.device())
        .write_slice(Tensor::view_of(gradient, 0, {gradient.size()}), {bucket.offsets[member]},
                     bucket.buffer);
  }
  bucket.ready += 1;
  start_ready_buckets();
}

void GradientReducer::finish() {
  // Variables without a gradient this step contribute zeros, so every rank still joins.
  for (std::size_t position = 0; position < variables_.size(); ++position) {
    if (received_[position]) continue;
    Tensor& variable = variables_[position];
    variable.set_grad(Tensor::zeros(variable.shape(), variable.dtype(), variable.device()));
    gradient_ready(variable);
  }
  start_ready_buckets();
  // Gradients updated by blocks: reduce-scattered into this process's block. Before the
  // in-place all-reduces below, which may write a gradient tensor these share (see there).
  for (std::size_t i = 0; i < block_updated_.size(); ++i) {
    Tensor& variable = variables_[block_updated_[i]];
    Tensor gradient = variable.grad();
    if (gradient.shape() != variable.shape() || gradient.dtype() != variable.dtype() ||
        gradient.device() != variable.device()) {
      throw ShapeError(str("data-parallel gradient of shape ", shape_to_string(gradient.shape()), " (",
                           dtype_name(gradient.dtype()), ") for variable '", variable.name(), "' of shape ",
                           shape_to_string(variable.shape()), " (", dtype_name(variable.dtype()), ")"));
    }
    Tensor& block = owned_gradient_blocks_[i];
    auto begin = std::chrono::steady_clock::now();
    CollectiveLog::record("reduce_scatter", group_->name(), static_cast<std::int64_t>(gradient.nbytes()));
    group_->reduce_scatter(gradient.raw_data(), block.raw_data(), block.size(), block.dtype(),
                           ReduceOperation::sum);
    communication_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  }
  // Large gradients: all-reduced in place, now that backward no longer reads any gradient.
  // A gradient rule may hand one tensor to several inputs (a + b gives both the same). Such a
  // gradient is reduced once and shared: reducing it again would sum it twice (the copy this
  // code used to make came after the first in-place reduction had already summed the data;
  // tests/mpi/mpi_tests.cpp's wide model caught it).
  std::vector<Tensor> reduced;
  for (std::size_t position : in_place_) {
    Tensor& variable = variables_[position];
    Tensor gradient = variable.grad();
    auto same_data = [&](const Tensor& other) { return other.raw_data() == gradient.raw_data(); };
    if (auto found = std::find_if(reduced.begin(), reduced.end(), same_data); found != reduced.end()) {
      variable.set_grad(*found);
      continue;
    }
    reduced.push_back(gradient);
    auto begin = std::chrono::steady_clock::now();
    CollectiveLog::record("all_reduce", group_->name(), static_cast<std::int64_t>(gradient.nbytes()));
    if (overlap_) {
      reduce_group().start_all_reduce(gradient.raw_data(), gradient.size(), gradient.dtype(),
                                      ReduceOperation::sum);
    } else {
      reduce_group().all_reduce(gradient.raw_data(), gradient.size(), gradient.dtype(),
                                ReduceOperation::sum);
    }
    communication_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  }
  // The optimizer's kernels come after this: on a GPU they wait for the reductions here,
  // which ran beside the backward pass until now.
  reduce_group().wait_for_started_all_reduces();
  last_communication_seconds_ = communication_seconds_;
  communication_seconds_ = 0;
  // Each gradient becomes a view of its slice of the bucket (DDP's gradient_as_bucket_view):
  // no copy back and no new allocation; the next step's zero_grad drops the views before the
  // bucket is refilled.
  for (Bucket& bucket : buckets_) {
    for (std::size_t member = 0; member < bucket.members.size(); ++member) {
      Tensor& variable = variables_[bucket.members[member]];
      variable.set_grad(Tensor::view_of(bucket.buffer, bucket.offsets[member], variable.shape()));
    }
    bucket.ready = 0;
    bucket.started = false;
  }
  for (std::size_t position : block_updated_) variables_[position].zero_grad();
  received_.assign(variables_.size(), false);
  next_to_start_ = 0;
}

void GradientReducer::update_owned_blocks(optimizers::Optimizer& optimizer) {
  const int rank = group_->rank();
  for (std::size_t i = 0; i < block_updated_.size(); ++i) {
    Tensor& variable = variables_[block_updated_[i]];
    const Tensor& block = owned_gradient_blocks_[i];
    optimizer.apply_to_block(variable, rank * block.size(), block);
  }
  for (std::size_t position : block_updated_) {
    Tensor& variable = variables_[position];
    std::int64_t block = variable.size() / group_->size();
    auto begin = std::chrono::steady_clock::now();
    CollectiveLog::record("all_gather", group_->name(), static_cast<std::int64_t>(variable.nbytes()));
    char* data = static_cast<char*>(variable.raw_data());
    group_->all_gather(data + static_cast<std::size_t>(rank * block) * dtype_size(variable.dtype()), data,
                       block, variable.dtype());
    last_communication_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  }
}

void GradientReducer::gather_optimizer_state(optimizers::Optimizer& optimizer) {
  const int rank = group_->rank();
  for (std::size_t position : block_updated_) {
    const Tensor& variable = variables_[position];
    std::int64_t block = variable.size() / group_->size();
    for (Tensor& slot : optimizer.slots_of(variable)) {
      char* data = static_cast<char*>(slot.raw_data());
      group_->all_gather(data + static_cast<std::size_t>(rank * block) * dtype_size(slot.dtype()), data,
                         block, slot.dtype());
    }
  }
}

}  // namespace keras::distribution
