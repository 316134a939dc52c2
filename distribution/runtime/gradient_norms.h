// The norms that gradient clipping (clipnorm, global_clipnorm: engine/optimizers.h) reads,
// across the processes of a distribution. Each process holds a block of each variable's
// gradient (the whole of a replicated one, its shard of one a layout splits); the whole
// gradient's squared norm is the sum over its distinct blocks. A block held by r processes
// (r = the product of the mesh axes the variable is replicated over) is counted 1/r times by
// each, so one all-reduce over the world of those weighted sums gives every variable's norm,
// whatever the layouts: under ModelParallel the global norm spans every shard, and under
// DataParallel (every variable replicated, its gradients already summed) it is the local one.
#pragma once
#include <vector>

#include "engine/tensor.h"

namespace keras::distribution {

// `squared_norms[i]` is this process's sum of squares of variables[i]'s gradient block; each
// becomes the whole gradient's, the same on every process. One float64 all-reduce of
// variables.size() values over the world; nothing without several processes.
void sum_squared_norms_over_processes(const std::vector<Tensor>& variables, std::vector<double>& squared_norms);

}  // namespace keras::distribution
