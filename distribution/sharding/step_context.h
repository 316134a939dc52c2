// The step context: what the distribution means for the step being run on this thread, resolved
// once — the ShardingContext (mesh, batch axis, this process's mesh coordinates, the axis
// groups) that every layer call, every rule and the loss of the step read. The trainer opens one
// per training, evaluation and prediction step; a layer called outside them (model(x) in user
// code) opens one for its own call. Nothing below reads the global distribution per call or per
// op (docs/ARCHITECTURE.md, "The life of a training step").
#pragma once
#include <optional>

#include "distribution/sharding/sharded_tensor.h"

namespace keras::distribution {

class StepContext {
 public:
  // Resolves the sharding of the global distribution, unless a step context is already open on
  // this thread: then this one joins it (costs a thread-local read) and resolves nothing.
  StepContext();
  ~StepContext();
  StepContext(const StepContext&) = delete;
  StepContext& operator=(const StepContext&) = delete;

  // The open step's sharding context; null when no step is open, or when the distribution does
  // not engage the layers (none, one process, or a mesh of another size than the job).
  static const ShardingContext* sharding();
  // Whether this context opened the step (no other was open on the thread): a layer called so
  // is called by user code outside any step, which gets its output whole (the data layout).
  bool outermost() const { return outermost_; }

 private:
  bool outermost_ = false;
  std::optional<ShardingContext> sharding_;
};

}  // namespace keras::distribution
