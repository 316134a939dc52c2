// The seam through which ops on annotated tensors are handed to a higher layer. The distribution
// module installs a handler (distribution/sharding/sharding_propagator.h) for the duration of a layer's
// call; every op in ops.h checks, before it touches its operands, whether a handler is installed
// and one of its operands carries a TensorAnnotation (a sharding), and if so hands itself over:
// its name, the family of rules that applies, the arguments a rule reads, and `compute`, the op
// itself, which the handler runs on the local blocks it prepared. The engine never learns what an
// annotation means and never calls a communicator (docs/ARCHITECTURE.md, "Sharding at op
// dispatch"). With no handler installed, or no annotated operand, the check is two loads and a
// branch: single-process code pays nothing.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace keras {

// Which sharding rule an op follows.
enum class OpFamily {
  elementwise,   // unary, binary and ternary ops with NumPy broadcasting, and cast
  contraction,   // matmul and einsum (`equation` spells both as einsum labels)
  reduction,     // sum, mean, max, min, var over `axes` (empty: all), with `keepdims`
  along_axis,    // softmax, log_softmax, argmax, argmin: `axes` holds the one axis
  transpose,     // `axes` holds the permutation
  concatenate,   // `axes` holds the axis
  convolution,   // conv over channels_last images: a contraction over the input channels
  window,        // max_pool, average_pool: each channel of each image on its own
  lookup,        // take: rows of a table (operand 0) picked by indices (operand 1); `axes` the axis
  reshape,       // `shape` the target, as the caller wrote it (one -1 allowed)
  random,        // dropout: draws per element; `draw_block` draws a block of the whole draw
  slice,         // `axes` the starts, `shape` the sizes (-1: to the end), as the caller wrote them
  broadcast,     // broadcast_to: `shape` the target
  one_hot,       // operand 0 the indices, `shape` holds the depth
  batch,         // batch_mean: a mean over `axes` (0 among them) of every process's rows
  assign,        // Tensor::assign: operand 0 the target, operand 1 the new value
  other,         // no rule yet: the handler gathers the operands and says so
};

struct OpCall {
  const char* name;
  OpFamily family;
  std::vector<Tensor> operands;
  // The op itself, given operands that carry no annotation (the handler's local blocks).
  std::function<Tensor(const std::vector<Tensor>& local)> compute;
  std::vector<std::int64_t> axes = {};
  bool keepdims = false;
  std::string equation = {};
  Shape shape = {};
  // Random ops: the op on `local` operands, drawing the block at `starts` of a draw of shape
  // `whole` (the rule gives each process its block of the one-process draw).
  std::function<Tensor(const std::vector<Tensor>& local, const Shape& whole, const Shape& starts)> draw_block = {};
};

class ShardedOpHandler {
 public:
  virtual ~ShardedOpHandler() = default;
  virtual Tensor dispatch(const OpCall& call) const = 0;
};

// This thread's handler, or null.
const ShardedOpHandler* sharded_op_handler();

// Installs `handler` (null: none) on this thread until the scope ends. A handler installs null
// while it computes, so the ops it runs on local blocks compute directly; the backward pass runs
// with none (gradient rules compute on the blocks their forward ops saw).
class ShardedOpScope {
 public:
  explicit ShardedOpScope(const ShardedOpHandler* handler);
  ~ShardedOpScope();
  ShardedOpScope(const ShardedOpScope&) = delete;
  ShardedOpScope& operator=(const ShardedOpScope&) = delete;

 private:
  const ShardedOpHandler* previous_;
};

namespace ops::detail {

// Whether the op with these operands must go through the installed handler.
inline bool goes_through_handler(std::initializer_list<const Tensor*> operands) {
  if (sharded_op_handler() == nullptr) return false;
  for (const Tensor* operand : operands) {
    if (operand->defined() && operand->annotation()) return true;
  }
  return false;
}
inline bool goes_through_handler(const std::vector<Tensor>& operands) {
  if (sharded_op_handler() == nullptr) return false;
  for (const Tensor& operand : operands) {
    if (operand.defined() && operand.annotation()) return true;
  }
  return false;
}

inline Tensor through_handler(OpCall call) { return sharded_op_handler()->dispatch(call); }

}  // namespace ops::detail
}  // namespace keras
