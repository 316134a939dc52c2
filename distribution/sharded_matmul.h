// x @ kernel when either is sharded: the rule, per mesh axis, that Dense (and any layer with a
// contraction) uses to decide what to communicate. x is an activation (..., K) with the batch in
// dimension 0, kernel is (K, N). Per mesh axis, with x's placement down and the kernel's across:
//
//              kernel R              kernel S(1) (column)          kernel S(0) (row)
//   x R        out R                 f(x); out S(last)             chunk x along K; out P
//   x S(K)     gather x; out R       gather x (grad reduce-        out P
//                                    scattered); out S(last)
//   x S(d<K)   out S(d); f(kernel)   gather kernel (grad reduce-   gather kernel (grad reduce-
//              (the trainer on the   scattered); out S(d)          scattered); out S(d)
//              batch axis)
//
// f is identity_with_summed_grad (Megatron's f): x replicated but used against a column block,
// so each process's gradient of x is a summand. The Megatron column->row pair is (x R, S(1))
// followed by (S(last), S(0)): one all-reduce forward (resolving P), one backward (in f).
// A replicated x against a row block is chunked rather than the kernel gathered, because the
// user asked for the kernel to be sharded: the memory they meant to save stays saved.
#pragma once
#include "distribution/sharded_tensor.h"

namespace keras::distribution {

struct ShardedTensor {
  Tensor local;
  Sharding sharding;
};

// Collective: every process of the mesh calls it with equal shardings.
ShardedTensor sharded_matmul(const ShardingContext& context, const Tensor& x,
                             const Sharding& x_sharding, const Tensor& kernel,
                             const Sharding& kernel_sharding);

// Sums the Partial axes of `value`: straight into `preferred`'s shard where it shards one
// (reduce-scatter), into a replicated tensor otherwise (all-reduce).
ShardedTensor resolve_partial(const ShardingContext& context, ShardedTensor value,
                              const Sharding* preferred = nullptr);

}  // namespace keras::distribution
