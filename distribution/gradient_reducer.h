// Sums the gradients of replicated variables across the processes of a data-parallel group,
// PyTorch DDP's way: variables go into flat buckets in reverse creation order (the order their
// gradients become ready in backward), the first bucket small (1 MiB) so communication starts
// early, the others capped at 25 MiB; a bucket's all-reduce runs as soon as its last gradient is
// ready and every earlier bucket has run, so buckets are always issued in index order on every
// rank. The all-reduce is the blocking one (see mpi_communicator.h for the measurement): it runs
// inside the backward pass, between gradient rules, but does not yet overlap with them; true
// overlap needs a communication thread that owns MPI, as Horovod has. Bucket buffers live as long as the reducer: freeing and re-faulting a multi-MiB
// buffer each step cost more than the all-reduce itself in these VMs (14 µs per 4 KiB page).
#pragma once
#include <memory>
#include <unordered_map>
#include <vector>

#include "distribution/communicator.h"
#include "engine/tensor.h"

namespace keras::distribution {

struct BucketOptions {
  std::size_t first_bucket_bytes = 1 << 20;
  std::size_t bucket_cap_bytes = 25 << 20;
  // Gradients at least this large skip the bucket and are all-reduced in place at the end of
  // backward: copying the MLP's 7.45 MB of gradients into buckets cost 0.6 ms of a 9.5 ms
  // data-parallel step (2 processes), and fusing tensors of a MiB or more saves no latency.
  std::size_t in_place_bytes = 1 << 20;
};

// Gradients on a GPU are bucketed on that GPU and reduced over NCCL on its communication
// stream, queued as each bucket fills, so they overlap the rest of backward there too.
class GradientReducer {
 public:
  // `overlap`: let the device go on while buckets are reduced (see start_all_reduce). Off
  // under ModelParallel, whose model-axis collectives run on other NCCL communicators of the
  // same GPU during backward: NCCL asks that collectives of different communicators on one
  // device not run concurrently unordered, or they may deadlock.
  GradientReducer(std::shared_ptr<Communicator> group, std::vector<Tensor> variables,
                  BucketOptions options = {}, bool overlap = true);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // True when this reducer was built for exactly these variables (same tensors, same order)
  // over `group`, and the group that reduces them (a GPU twin) is still there.
  bool serves(const std::shared_ptr<Communicator>& group, const std::vector<Tensor>& variables) const;
  // The hook for keras::backward: `variable`'s gradient is final.
  void gradient_ready(const Tensor& variable);
  // Starts the buckets not yet started, waits for all, and leaves the summed gradient in every
  // variable's grad(). Variables that got no gradient contribute zeros.
  void finish();
  std::size_t bucket_count() const { return buckets_.size(); }
  std::size_t in_place_count() const { return in_place_.size(); }
  // Seconds spent in all-reduces during the last step.
  double last_communication_seconds() const { return last_communication_seconds_; }

 private:
  struct Bucket {
    Tensor buffer;  // flat, one dtype
    std::vector<std::size_t> members;  // indices into variables_
    std::vector<std::int64_t> offsets;
    std::size_t ready = 0;
    bool started = false;
  };
  void start(Bucket& bucket);
  void start_ready_buckets();
  Communicator& reduce_group() const;

  std::shared_ptr<Communicator> group_;  // the processes; also checks the bucket layout
  // Where the gradients are reduced: group_ itself for CPU gradients, its NCCL twin for GPU
  // ones. The twin is held weakly, as group_ holds it: finalize() releases NCCL first even
  // while a model (and its reducer) lives on.
  std::weak_ptr<Communicator> device_twin_;
  bool reduces_on_twin_ = false;
  // Whether the compute stream may go on while buckets are reduced (no other collective runs
  // beside them; see the constructor).
  bool overlap_ = true;
  std::vector<Tensor> variables_;
  std::unordered_map<TensorImpl*, std::size_t> index_of_;
  std::vector<std::size_t> bucket_of_;
  std::vector<bool> received_;
  static constexpr std::size_t kInPlace = static_cast<std::size_t>(-1);
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> in_place_;  // positions, in the fixed order they are reduced
  std::size_t next_to_start_ = 0;
  double communication_seconds_ = 0;
  double last_communication_seconds_ = 0;
};

}  // namespace keras::distribution
