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
#include <optional>
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

// Keras' autocast (its AutocastScope): while a layer whose dtype policy computes in another
// dtype than it stores its variables in runs call() (mixed_bfloat16: bfloat16 compute, float32
// variables), every op reads a variable of the variable dtype as the compute dtype: the op
// takes cast(variable) instead, whose gradient flows back to the float32 variable. Variables
// are the tensors with a name (Layer::add_weight names them). Layers install the scope
// (layers/layer.cpp); the same seam as sharding carries it, so a user's own layer gets it too.
struct Autocast {
  DType variable_dtype;
  DType compute_dtype;
};

// This thread's autocast, or null.
const Autocast* autocast_policy();

// Installs `autocast` (nullopt: none, as a float32 layer inside a mixed one) until the scope
// ends.
class AutocastScope {
 public:
  explicit AutocastScope(std::optional<Autocast> autocast);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  std::optional<Autocast> current_;
  const Autocast* previous_;
};

namespace ops::detail {

inline bool is_autocast(const Tensor& operand, const Autocast* autocast) {
  // (name() gives "<unnamed>" for a tensor without one: the stored name is what tells.)
  return autocast != nullptr && operand.defined() && operand.dtype() == autocast->variable_dtype &&
         !operand.impl()->name.empty();
}

// Whether the op with these operands must go through the seam: an annotated operand under an
// installed handler, or a variable to autocast. Neither installed: two loads and a branch.
inline bool goes_through_handler(std::initializer_list<const Tensor*> operands) {
  const ShardedOpHandler* handler = sharded_op_handler();
  const Autocast* autocast = autocast_policy();
  if (handler == nullptr && autocast == nullptr) return false;
  for (const Tensor* operand : operands) {
    if (handler != nullptr && operand->defined() && operand->annotation()) return true;
    if (is_autocast(*operand, autocast)) return true;
  }
  return false;
}
inline bool goes_through_handler(const std::vector<Tensor>& operands) {
  const ShardedOpHandler* handler = sharded_op_handler();
  const Autocast* autocast = autocast_policy();
  if (handler == nullptr && autocast == nullptr) return false;
  for (const Tensor& operand : operands) {
    if (handler != nullptr && operand.defined() && operand.annotation()) return true;
    if (is_autocast(operand, autocast)) return true;
  }
  return false;
}

// Casts the variables to autocast, then hands the call to the handler when an operand is
// annotated, or runs it.
Tensor through_handler(OpCall call);

}  // namespace ops::detail
}  // namespace keras
