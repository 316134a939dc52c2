// The sharding rules: for each family of operations, given how its inputs lie over the mesh,
// where each input must be moved first and how the output then lies (PyTorch DTensor's op
// strategies; Megatron's column/row pairs fall out of the contraction rule). Rules only decide:
// redistribute() moves the data and ShardingContext::operand() adds the gradient sums, so a
// sharded layer is "ask the rule, move the operands, compute locally". A layer with no rule
// gets its input in the data layout (Layer::operator()), and summary() marks it.
#pragma once
#include <string>
#include <vector>

#include "distribution/sharding/placement.h"

namespace keras::distribution::sharding_rules {

// A rule's answer: the sharding each input must have (in the order the rule takes them) and
// the output's, which may be Partial on some mesh axes (a sum still to be made).
struct OperationSharding {
  std::vector<Sharding> inputs;
  Sharding output;
};

// A two-operand contraction written as einsum labels, one letter per dimension:
// "abK,KN->abN" is Dense on a rank-3 activation. A label in both operands but not the output
// is contracted; one in all three is a batch-like dimension both operands share.
struct Contraction {
  std::string x, kernel, output;
  // Dense's x @ kernel: x of `x_rank` dimensions (the last contracted), kernel (K, N).
  static Contraction dense(int x_rank);
};

// x (an activation) contracted with kernel, per mesh axis:
// - x sharded on a dimension the output keeps: x stays, the kernel is gathered (or cut to the
//   same block where it shares that dimension), the output is sharded there;
// - else the kernel sharded on a dimension the output keeps (column-parallel): x is gathered
//   (or cut where shared), the output is sharded there;
// - else the kernel sharded on a contracted dimension (row-parallel): x is cut to the same
//   block (this is what the user asked: the kernel's memory stays split), the output Partial;
// - else x sharded on a contracted dimension: x is gathered, the output replicated.
OperationSharding contraction(const Contraction& labels, const Sharding& x, const Sharding& kernel);

// Element-wise `main` op `operand`, where operand's dimension j lines up with main's
// dimension aligned[j] (a bias: {last}). The operand takes main's blocks where they line up
// and is replicated elsewhere; the output lies as main.
OperationSharding broadcast(const Sharding& main, const Sharding& operand,
                            const std::vector<int>& aligned);

// Rows of `table` (rows, features) looked up by `indices`: the table is replicated where the
// indices differ between processes; the output keeps the indices' placements, is sharded on
// its last dimension where the table is split by features, and Partial where it is split by
// rows (each process contributes the rows it holds).
OperationSharding lookup(const Sharding& indices, const Sharding& table);

// A sum (or mean) over `dims`: mesh axes that shard a reduced dimension make the result
// Partial; the others keep their placement (renumbered when !keep_dims).
Sharding reduction(const Sharding& x, const std::vector<int>& dims, bool keep_dims);

// Where a Partial value is summed to: into `preferred`'s shard on an axis where that
// dimension is free (a reduce-scatter), replicated otherwise (an all-reduce).
Sharding resolved(const Sharding& value, const Sharding* preferred = nullptr);

// The same tensor with dimension `dim` whole on every axis (softmax normalises along it).
Sharding whole_along(const Sharding& value, int dim);

}  // namespace keras::distribution::sharding_rules
