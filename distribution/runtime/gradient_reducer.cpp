// Bucketed gradient all-reduce.
#include "distribution/runtime/gradient_reducer.h"

#include "distribution/runtime/collective_log.h"
#include "distribution/runtime/runtime.h"
#include "engine/backend.h"
#include "engine/environment.h"

#include <chrono>
#include <algorithm>
#include <cstring>


namespace keras::distribution {

BucketOptions BucketOptions::from_environment() {
  BucketOptions options;
  if (std::optional<std::string> compression = environment::get("KERAS_GRADIENT_COMPRESSION")) {
    if (*compression == "bfloat16") {
      options.compress_to_bfloat16 = true;
    } else if (*compression != "none") {
      throw ValueError(str("KERAS_GRADIENT_COMPRESSION: got '", compression->substr(0, 40),
                           "'; expected none or bfloat16"));
    }
  }
  std::optional<std::string> sizing = environment::get("KERAS_GRADIENT_BUCKETS");
  if (!sizing || *sizing == "by_link") return options;
  if (*sizing == "packed") {
    options.packed = true;
  } else if (*sizing == "as_on_one_machine") {
    options.size_by_link = false;
  } else {
    throw ValueError(str("KERAS_GRADIENT_BUCKETS: got '", sizing->substr(0, 40), "'; expected by_link, packed ",
                         "or as_on_one_machine"));
  }
  return options;
}

GradientReducer::GradientReducer(std::shared_ptr<Communicator> group,
                                 std::vector<Tensor> variables, BucketOptions options, bool overlap,
                                 bool shard_updates)
    : group_(std::move(group)), overlap_(overlap), variables_(std::move(variables)),
      compress_(options.compress_to_bfloat16) {
  if (compress_) shard_updates = false;  // a reduce-scatter of bfloat16 blocks is not written
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
  check_layout_and_size_buckets(options, shard_updates, device);
}

double GradientReducer::agreed_latency(Communicator& group) {
  // One all-reduce to settle connections, then the median of three (each is what a bucket's
  // collective costs beyond its bytes, the signature exchange included where there is one).
  std::int64_t probe = 0;
  group.all_reduce(&probe, 1, DType::int64, ReduceOperation::max);
  std::vector<double> times;
  for (int i = 0; i < 3; ++i) {
    auto begin = std::chrono::steady_clock::now();
    group.all_reduce(&probe, 1, DType::int64, ReduceOperation::max);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
  }
  std::sort(times.begin(), times.end());
  return times[1];
}

void GradientReducer::check_layout_and_size_buckets(BucketOptions options, bool shard_updates,
                                                    Device device) {
  // The same model on every rank gives the same buckets; check it once with verified
  // collectives (the variables' count, elements and a hash of their sizes and dtypes), so a
  // mismatch is an error now rather than a hang or garbage later. The link's latency rides
  // the second: every rank sizes its buckets by the slowest's.
  const bool on_host = !reduces_on_twin_ && group_->size() > 1;
  const double latency = on_host && options.size_by_link && !options.packed ? agreed_latency(*group_) : 0.0;
  std::int64_t elements = 0;
  std::uint64_t hash = 1469598103934665603ULL;
  for (const Tensor& variable : variables_) {
    elements += variable.size();
    hash = (hash ^ static_cast<std::uint64_t>(variable.size())) * 1099511628211ULL;
    hash = (hash ^ static_cast<std::uint64_t>(variable.dtype())) * 1099511628211ULL;
  }
  const auto hash_value = static_cast<std::int64_t>(hash >> 1);
  std::int64_t low[3] = {static_cast<std::int64_t>(variables_.size()), elements, hash_value};
  std::int64_t high[4] = {low[0], low[1], low[2], static_cast<std::int64_t>(latency * 1e9)};
  group_->all_reduce(low, 3, DType::int64, ReduceOperation::min);
  group_->all_reduce(high, 4, DType::int64, ReduceOperation::max);
  if (low[0] != high[0] || low[1] != high[1] || low[2] != high[2]) {
    throw CollectiveError(str("data-parallel gradients differ across processes: this process has ",
                              elements, " gradient elements in ", variables_.size(), " variables, others "
                              "have between ", low[1], " and ", high[1], " in ", low[0], " to ", high[0],
                              " (or other shapes or dtypes); every process must build the same model"));
  }
  link_latency_seconds_ = static_cast<double>(high[3]) / 1e9;
  // Packing trades a copy of the large gradients for the collectives they and a small first
  // bucket would add (blocking on the CPU: no overlap is lost).
  std::size_t in_place_bytes = 0, in_place_tensors = 0;
  for (const Tensor& variable : variables_) {
    if (variable.nbytes() >= options.in_place_bytes) {
      in_place_bytes += variable.nbytes();
      in_place_tensors += 1;
    }
  }
  const bool slow_link =
      on_host && options.size_by_link &&
      link_latency_seconds_ * static_cast<double>(in_place_tensors + 1) >
          static_cast<double>(std::max<std::size_t>(in_place_bytes, options.first_bucket_bytes)) / kCopyBytesPerSecond;
  packed_for_latency_ = options.packed || slow_link;
  if (packed_for_latency_) {
    options.in_place_bytes = static_cast<std::size_t>(-1);
    options.first_bucket_bytes = options.bucket_cap_bytes;
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
      std::size_t used = static_cast<std::size_t>(last.gradient_elements) * dtype_size(last.buffer.dtype());
      new_bucket = used > 0 && used + bytes > cap;
    }
    if (new_bucket) {
      if (!buckets_.empty()) cap = options.bucket_cap_bytes;
      Bucket bucket;
      bucket.buffer = Tensor::empty({0}, variable.dtype(), device);
      buckets_.push_back(std::move(bucket));
    }
    Bucket& bucket = buckets_.back();
    bucket.offsets.push_back(bucket.gradient_elements);
    bucket.members.push_back(position);
    bucket.gradient_elements += variable.size();
    bucket_of_[position] = buckets_.size() - 1;
  }
  // The buffers: the gradients, then (the last bucket's) the step flag, which needs a float
  // sum on the host.
  if (!buckets_.empty() && on_host && (buckets_.back().buffer.dtype() == DType::float32 ||
                                       buckets_.back().buffer.dtype() == DType::float64)) {
    flag_bucket_ = buckets_.size() - 1;
  }
  for (std::size_t index = 0; index < buckets_.size(); ++index) {
    Bucket& bucket = buckets_[index];
    std::int64_t flag = index == flag_bucket_ ? 1 : 0;
    bucket.buffer = Tensor::zeros({bucket.gradient_elements + flag}, bucket.buffer.dtype(), device);
    if (compress_ && bucket.buffer.dtype() == DType::float32) bucket.wire = Tensor::zeros({bucket.gradient_elements + flag}, bfloat16, device);
  }
}

void GradientReducer::set_step_flag(bool wanted) {
  if (flag_bucket_ == kNone) {
    throw ValueError("GradientReducer::set_step_flag: this reducer has no host bucket for a flag "
                     "(flag_rides_gradients() is false)");
  }
  Bucket& bucket = buckets_[flag_bucket_];
  if (bucket.wire.defined()) {
    bucket.wire.data<BFloat16>()[bucket.gradient_elements] = BFloat16(wanted ? 1.0F : 0.0F);
  } else if (bucket.buffer.dtype() == DType::float32) {
    bucket.buffer.data<float>()[bucket.gradient_elements] = wanted ? 1.0F : 0.0F;
  } else {
    bucket.buffer.data<double>()[bucket.gradient_elements] = wanted ? 1.0 : 0.0;
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
  Tensor& sent = bucket.wire.defined() ? bucket.wire : bucket.buffer;
  CollectiveLog::record("all_reduce", group_->name(), static_cast<std::int64_t>(sent.nbytes()));
  wire_bytes_ += static_cast<std::int64_t>(sent.nbytes());
  uncompressed_bytes_ += static_cast<std::int64_t>(bucket.buffer.nbytes());
  const DType dtype = sent.dtype();
  if (overlap_) {
    reduce_group().start_all_reduce(sent.raw_data(), sent.size(), dtype, ReduceOperation::sum);
  } else {
    reduce_group().all_reduce(sent.raw_data(), sent.size(), dtype, ReduceOperation::sum);
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
  if (bucket.wire.defined()) {  // rounded to bfloat16 on the way in
    Tensor slot = Tensor::view_of(bucket.wire, bucket.offsets[member], {gradient.size()});
    backend_for(gradient.device()).cast(Tensor::view_of(gradient, 0, {gradient.size()}), slot);
  } else if (gradient.device().is_cpu()) {
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
    Tensor sent = gradient;
    if (compress_ && gradient.dtype() == DType::float32) {
      sent = Tensor::empty(gradient.shape(), bfloat16, gradient.device());
      backend_for(gradient.device()).cast(gradient, sent);
      compressed_in_place_.emplace_back(sent, gradient);
    }
    CollectiveLog::record("all_reduce", group_->name(), static_cast<std::int64_t>(sent.nbytes()));
    wire_bytes_ += static_cast<std::int64_t>(sent.nbytes());
    uncompressed_bytes_ += static_cast<std::int64_t>(gradient.nbytes());
    if (overlap_) {
      reduce_group().start_all_reduce(sent.raw_data(), sent.size(), sent.dtype(), ReduceOperation::sum);
    } else {
      reduce_group().all_reduce(sent.raw_data(), sent.size(), sent.dtype(), ReduceOperation::sum);
    }
    communication_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  }
  // The optimizer's kernels come after this: on a GPU they wait for the reductions here,
  // which ran beside the backward pass until now.
  reduce_group().wait_for_started_all_reduces();
  last_communication_seconds_ = communication_seconds_;
  communication_seconds_ = 0;
  // Compressed sums widen back to float32, where the gradients' views and the flag read them.
  for (Bucket& bucket : buckets_) {
    if (bucket.wire.defined()) backend_for(bucket.buffer.device()).cast(bucket.wire, bucket.buffer);
  }
  for (auto& [sent, gradient] : compressed_in_place_) backend_for(gradient.device()).cast(sent, gradient);
  compressed_in_place_.clear();
  last_wire_bytes_ = wire_bytes_;
  last_uncompressed_bytes_ = uncompressed_bytes_;
  wire_bytes_ = uncompressed_bytes_ = 0;
  // Each gradient becomes a view of its slice of the bucket (DDP's gradient_as_bucket_view):
  // no copy back and no new allocation; the next step's zero_grad drops the views before the
  // bucket is refilled.
  // The step flag: read, then cleared for a step that sets none.
  if (flag_bucket_ != kNone) {
    Bucket& bucket = buckets_[flag_bucket_];
    if (bucket.buffer.dtype() == DType::float32) {
      float& flag = bucket.buffer.data<float>()[bucket.gradient_elements];
      step_flag_on_any_process_ = flag > 0.5F;
      flag = 0.0F;
    } else {
      double& flag = bucket.buffer.data<double>()[bucket.gradient_elements];
      step_flag_on_any_process_ = flag > 0.5;
      flag = 0.0;
    }
  }
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
  state_held_by_blocks_ = state_held_by_blocks_ || !block_updated_.empty();
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
  if (!state_held_by_blocks_) return;
  state_held_by_blocks_ = false;
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
