// Sums the gradients of replicated variables across the processes of a data-parallel group,
// PyTorch DDP's way: variables go into flat buckets in reverse creation order (the order their
// gradients become ready in backward), the first bucket small (1 MiB) so communication starts
// early, the others capped at 25 MiB; a bucket's all-reduce runs as soon as its last gradient is
// ready and every earlier bucket has run, so buckets are issued in index order on every rank.
// On the CPU that all-reduce blocks, between gradient rules: a communication thread (Horovod's
// design) saved nothing on these cores (benchmarks/overlap_probe, README "Measured"). On a GPU
// buckets are queued on NCCL's stream and overlap the rest of backward. Bucket buffers live as
// long as the reducer: re-faulting a multi-MiB buffer each step cost more than the all-reduce.
#pragma once
#include <memory>
#include <unordered_map>
#include <vector>

#include "distribution/runtime/communicator.h"
#include "engine/optimizers.h"
#include "engine/tensor.h"

namespace keras::distribution {

struct BucketOptions {
  std::size_t first_bucket_bytes = 1 << 20;
  std::size_t bucket_cap_bytes = 25 << 20;
  // Gradients at least this large skip the bucket and are all-reduced in place at the end of
  // backward: copying the MLP's 7.45 MB of gradients into buckets cost 0.6 ms of a 9.5 ms
  // data-parallel step (2 processes), and fusing tensors of a MiB or more saves no latency.
  std::size_t in_place_bytes = 1 << 20;
  // Size the buckets by the link: the constructor times a small all-reduce over the group
  // (every process takes the slowest's time) and, where that latency times the collectives
  // that in-place gradients and a small first bucket would add exceeds copying those gradients
  // into buckets (at kCopyBytesPerSecond), every gradient goes into buckets capped at
  // bucket_cap_bytes, the first one too. On one machine nothing changes; across a network
  // with 1 ms each way the example's MLP takes one all-reduce a step instead of two.
  bool size_by_link = true;
  // Packs every gradient into buckets capped at bucket_cap_bytes whatever the link.
  bool packed = false;
  // Gradient compression (PyTorch DDP's bf16_compress_hook, Horovod's Compression.fp16):
  // float32 gradients are rounded to bfloat16 for the wire, summed in bfloat16 (each pair in
  // float32, rounded once: distribution/runtime/half_precision_reduction.h) and widened back,
  // halving the bytes every step moves. Off by default: the sums then differ from one
  // process's in the third significant digit. Disables updates by blocks.
  bool compress_to_bfloat16 = false;
  // The defaults, with KERAS_GRADIENT_BUCKETS applied: "by_link" (the default), "packed",
  // or "as_on_one_machine" (size_by_link off: fixed, reproducible buckets), and
  // KERAS_GRADIENT_COMPRESSION: "none" (the default) or "bfloat16". Anything else is a
  // ValueError naming the variable, the value and the choices.
  static BucketOptions from_environment();
};

// Gradients on a GPU are bucketed on that GPU and reduced over NCCL on its communication
// stream, queued as each bucket fills, so they overlap the rest of backward there too.
//
// Sharded updates (ZeRO stage 1's update, as in PyTorch's ZeroRedundancyOptimizer): a large
// gradient (in place, see BucketOptions) whose size the group divides is reduce-scattered
// instead of all-reduced, each process updates only its block of the variable and of its
// optimizer state (update_owned_blocks), and an all-gather of the updated blocks leaves the
// whole variable on every process. The bytes moved are an all-reduce's; the optimizer's work
// and memory traffic per process are divided by the group size. On 2 processes Adam over the
// MLP's 1.86 M parameters took 1.2-1.4 ms a step on each (memory-bound); see README.md,
// "Measured", for the step. The results are the all-reduce path's, bit for bit, on 2
// processes; on more, the sums add in another order. The optimizer state keeps the whole
// variable's shape, current only in this process's blocks until gather_optimizer_state(), which
// Model calls at the end of fit(), before a backup and when this reducer is replaced. Only on
// groups whose reduce_scatter is native (Communicator::reduce_scatter_is_native: MPI's ring).
class GradientReducer {
 public:
  // `overlap`: let the device go on while buckets are reduced (see start_all_reduce). Off
  // under ModelParallel, whose model-axis collectives run on other NCCL communicators of the
  // same GPU during backward: NCCL asks that collectives of different communicators on one
  // device not run concurrently unordered, or they may deadlock.
  // `shard_updates`: reduce-scatter the large gradients and update by blocks (above); only
  // for CPU gradients reduced by `group` itself.
  GradientReducer(std::shared_ptr<Communicator> group, std::vector<Tensor> variables,
                  BucketOptions options = {}, bool overlap = true, bool shard_updates = false);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // True when this reducer was built for exactly these variables (same tensors, same order)
  // over `group`, and the group that reduces them (a GPU twin) is still there.
  bool serves(const std::shared_ptr<Communicator>& group, const std::vector<Tensor>& variables) const;
  // The hook for keras::backward: `variable`'s gradient is final.
  void gradient_ready(const Tensor& variable);
  // Starts the buckets not yet started, waits for all, and leaves the summed gradient in every
  // variable's grad(). Variables that got no gradient contribute zeros. A variable updated by
  // blocks is left without a grad(): the summed block waits in the reducer for
  // update_owned_blocks().
  void finish();
  // After finish() and the optimizer's apply() of this step (which counts the step): updates
  // this process's block of every variable updated by blocks, then all-gathers the blocks.
  void update_owned_blocks(optimizers::Optimizer& optimizer);
  // Makes the optimizer state of the variables updated by blocks whole on every process (an
  // all-gather of each slot): before the state is saved. Collective over the group; nothing to
  // do (and no collective) when no update by blocks happened since the last gather, which every
  // process of the group knows alike.
  void gather_optimizer_state(optimizers::Optimizer& optimizer);
  // Whether an update by blocks left the optimizer state current only in this process's blocks.
  bool optimizer_state_held_by_blocks() const { return state_held_by_blocks_; }
  std::size_t block_updated_count() const { return block_updated_.size(); }
  std::size_t bucket_count() const { return buckets_.size(); }
  std::size_t in_place_count() const { return in_place_.size(); }
  // Whether gradients travel as bfloat16 (BucketOptions::compress_to_bfloat16), and the
  // bytes the last step's gradients took on the wire and would have taken uncompressed.
  bool compresses() const { return compress_; }
  std::int64_t last_wire_bytes() const { return last_wire_bytes_; }
  std::int64_t last_uncompressed_bytes() const { return last_uncompressed_bytes_; }
  // Seconds spent in all-reduces during the last step.
  double last_communication_seconds() const { return last_communication_seconds_; }
  // Whether the buckets were sized for a slow link (BucketOptions::size_by_link) and the
  // latency every process agreed on, in seconds.
  bool packed_for_latency() const { return packed_for_latency_; }
  double link_latency_seconds() const { return link_latency_seconds_; }

  // A flag summed over the group with the step's gradients, in the last bucket, so that
  // deciding together costs no collective of its own (the trainer's "does any process read
  // the logs after this step", BatchShard::any_process otherwise). Only where
  // flag_rides_gradients(): CPU buckets (a GPU's would need a copy back and a wait). Set
  // before backward; read after finish(); a step that sets none sends false.
  bool flag_rides_gradients() const { return flag_bucket_ != kNone; }
  void set_step_flag(bool wanted);
  bool step_flag_on_any_process() const { return step_flag_on_any_process_; }

 private:
  struct Bucket {
    Tensor buffer;  // flat, one dtype: the gradients, then (the last bucket's) the step flag
    Tensor wire;    // compressing: the buffer in bfloat16, which the all-reduce sums
    std::int64_t gradient_elements = 0;
    std::vector<std::size_t> members;  // indices into variables_
    std::vector<std::int64_t> offsets;
    std::size_t ready = 0;
    bool started = false;
  };
  // Copying into a bucket, measured: the MLP's 7.45 MB in 0.6 ms (about 12 GB/s).
  static constexpr double kCopyBytesPerSecond = 12e9;
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  // The slowest process's time for a small all-reduce over the group, in seconds.
  static double agreed_latency(Communicator& group);
  void check_layout_and_size_buckets(BucketOptions options, bool shard_updates, Device device);
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
  // Variables updated by blocks (positions, a subset of in_place_'s), each with its summed
  // block of the gradient after finish().
  std::vector<std::size_t> block_updated_;
  std::vector<Tensor> owned_gradient_blocks_;
  std::size_t next_to_start_ = 0;
  bool packed_for_latency_ = false;
  double link_latency_seconds_ = 0;
  std::size_t flag_bucket_ = kNone;  // the bucket whose element after its gradients is the flag
  bool step_flag_on_any_process_ = false;
  double communication_seconds_ = 0;
  double last_communication_seconds_ = 0;
  bool state_held_by_blocks_ = false;
  bool compress_ = false;
  // Compressing: the in-place gradients' bfloat16 copies in flight, widened back by finish().
  std::vector<std::pair<Tensor, Tensor>> compressed_in_place_;  // (wire, gradient)
  std::int64_t wire_bytes_ = 0, uncompressed_bytes_ = 0;
  std::int64_t last_wire_bytes_ = 0, last_uncompressed_bytes_ = 0;
};

}  // namespace keras::distribution
