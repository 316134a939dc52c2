// Collectives as autograd ops, and the one planner that moves a tensor from one sharding to
// another. Each op has its conjugate gradient beside it (docs/ARCHITECTURE.md, invariant 2):
//
//   op                          forward              backward
//   all_reduce_sum              P -> R  all-reduce   identity                 (Megatron's g)
//   identity_with_summed_grad   R -> R  identity     all-reduce               (Megatron's f)
//   all_gather(dim)             S -> R  all-gather   local chunk, or reduce-scatter when the
//                                                    gradient arriving is partial
//   reduce_scatter(dim)         P -> S  reduce-scat. all-gather
//   local_chunk(dim)            R -> S  slice        all-gather
//   all_to_all(a, b)            S(a) -> S(b)         all_to_all(b, a)
//
// The gradient convention: a replicated tensor's gradient is replicated (the same on every
// process of the group), a shard's gradient is the gradient of its block, and a partial
// tensor's gradient is the full gradient on every process. A layer that feeds a replicated
// tensor into per-process computation (a column-parallel matmul) passes it through
// identity_with_summed_grad first, which turns the per-process (partial) gradients back into
// the replicated one. The engine never sees a communicator: these ops live here and call it.
#pragma once
#include <memory>

#include "distribution/runtime/communicator.h"
#include "distribution/sharding/placement.h"

namespace keras::distribution {

// Whether the gradient that will arrive at an all-gather's replicated output is replicated
// (the default, under the convention above) or partial (each process holds a summand).
enum class ArrivingGradient { replicated, partial };

Tensor all_reduce_sum(const Tensor& partial, const std::shared_ptr<Communicator>& group);
Tensor identity_with_summed_grad(const Tensor& replicated, const std::shared_ptr<Communicator>& group);
Tensor all_gather(const Tensor& shard, const std::shared_ptr<Communicator>& group, int dim,
                  ArrivingGradient arriving = ArrivingGradient::replicated);
Tensor reduce_scatter(const Tensor& partial, const std::shared_ptr<Communicator>& group, int dim);
Tensor local_chunk(const Tensor& replicated, const std::shared_ptr<Communicator>& group, int dim);
// Today an all-gather along `from_dim` and a local chunk along `to_dim`: correct, but moves
// (group size) times the bytes of a true all-to-all; Communicator has no all_to_all yet.
Tensor all_to_all(const Tensor& shard, const std::shared_ptr<Communicator>& group, int from_dim,
                  int to_dim);

// `local` is this process's part of a tensor laid out as `from`; returns its part under `to`.
// Per mesh axis: Partial -> Replicate all-reduce, Partial -> Shard reduce-scatter,
// Shard -> Replicate all-gather, Shard(a) -> Shard(b) all-to-all, Replicate -> Shard local
// chunk; Partial is never a target (it exists only as a matmul's output). Partial axes are
// resolved first, then shards are gathered, then new shards cut, so no step needs data that
// an earlier one dropped. Collective: every process of the mesh calls it with equal arguments.
// `arriving` (one entry per mesh axis, or empty for all replicated) says, for each axis, what
// the gradient arriving at a gathered output will be (see all_gather).
Tensor redistribute(const Tensor& local, const Sharding& from, const Sharding& to,
                    const std::vector<ArrivingGradient>& arriving = {});

}  // namespace keras::distribution
