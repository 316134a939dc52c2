// Sums the gradients of replicated variables across the processes of a data-parallel group,
// PyTorch DDP's way: variables go into flat buckets in reverse creation order (the order their
// gradients become ready in backward), the first bucket small (1 MiB) so communication starts
// early, the others capped at 25 MiB; a bucket's all-reduce starts as soon as its last gradient
// is ready and every earlier bucket has started, so buckets are always issued in index order on
// every rank. Bucket buffers live as long as the reducer: freeing and re-faulting a multi-MiB
// buffer each step cost more than the all-reduce itself in these VMs (14 µs per 4 KiB page).
#pragma once
#include <memory>
#include <unordered_map>
#include <vector>

#include "distribution/communicator.h"
#include "engine/tensor.h"

namespace keras::distribution {

class MpiCommunicator;

struct BucketOptions {
  std::size_t first_bucket_bytes = 1 << 20;
  std::size_t bucket_cap_bytes = 25 << 20;
};

class GradientReducer {
 public:
  GradientReducer(std::shared_ptr<Communicator> group, std::vector<Tensor> variables,
                  BucketOptions options = {});
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // True when this reducer was built for exactly these variables (same tensors, same order).
  bool serves(const std::vector<Tensor>& variables) const;
  // The hook for keras::backward: `variable`'s gradient is final.
  void gradient_ready(const Tensor& variable);
  // Starts the buckets not yet started, waits for all, and leaves the summed gradient in every
  // variable's grad(). Variables that got no gradient contribute zeros.
  void finish();
  std::size_t bucket_count() const { return buckets_.size(); }
  // Time spent waiting in finish() during the last step (exposed communication), in seconds.
  double last_wait_seconds() const { return last_wait_seconds_; }

 private:
  struct Bucket {
    Tensor buffer;  // flat, one dtype
    std::vector<std::size_t> members;  // indices into variables_
    std::vector<std::int64_t> offsets;
    std::size_t ready = 0;
    bool started = false;
    void* request = nullptr;  // MPI_Request*, when started on MPI
  };
  void start(Bucket& bucket);
  void start_ready_buckets();

  std::shared_ptr<Communicator> group_;
  MpiCommunicator* mpi_ = nullptr;
  std::vector<Tensor> variables_;
  std::unordered_map<TensorImpl*, std::size_t> index_of_;
  std::vector<std::size_t> bucket_of_;
  std::vector<bool> received_;
  std::vector<Bucket> buckets_;
  std::size_t next_to_start_ = 0;
  double last_wait_seconds_ = 0;
};

}  // namespace keras::distribution
