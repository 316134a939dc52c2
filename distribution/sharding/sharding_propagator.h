// The sharding propagator: the handler that the engine's ops hand themselves to when one of
// their operands is sharded (engine/op_dispatch.h). For each op it looks up the rule of the op's
// family, moves the operands to the blocks the rule asks for (redistribute(), with the gradient
// sums of ShardingContext::operand), runs the op on those local blocks and records the output's
// sharding on it (docs/ARCHITECTURE.md, "Sharding at op dispatch"). An op with no rule for the
// shardings it got has its operands gathered first — variables to replicated, activations to the
// data layout — and is listed once, in a log line on process 0 and in model.summary(): correct,
// never silently wrong, and visible.
//
// A Layer installs one for its call() when a distribution engages the layers (layers/layer.cpp);
// the code that still computes on local blocks itself (Dropout, dot-product attention) installs
// none.
#pragma once
#include <string>
#include <vector>

#include "distribution/sharding/sharded_tensor.h"
#include "engine/op_dispatch.h"

namespace keras::distribution {

class ShardingPropagator : public ShardedOpHandler {
 public:
  // `context` must outlive the propagator; `layer_path` names the layer in what it reports;
  // `output_layout` (the LayoutMap's "<path>/output", or null) is where a Partial product of the
  // layer's shape is summed to: a reduce-scatter into it rather than an all-reduce and a cut.
  ShardingPropagator(const ShardingContext& context, std::string layer_path,
                     TensorLayoutPtr output_layout = nullptr);
  Tensor dispatch(const OpCall& call) const override;

 private:
  // How an operand lies: its annotation, or for an unannotated one, the data layout when it
  // looks like an activation of an op whose output has rank `output_rank` and `rows` rows (not
  // a variable, of that rank, with those rows; rows < 0: any), replicated otherwise (constants,
  // operands broadcast along the batch).
  Sharding operand_sharding(const Tensor& operand, int output_rank, std::int64_t rows = -1) const;
  // Where a product lying as `product` (Partial on some axes) is summed to.
  Sharding summed(const Sharding& product) const;
  // A rule's local result `out`, lying as `lying`, summed there and annotated.
  Tensor summed_output(Tensor out, const Sharding& lying) const;
  // One function per family of rules (the header comment of each in the .cpp says the rule).
  Tensor elementwise(const OpCall& call) const;
  Tensor contraction(const OpCall& call) const;
  Tensor along_axes(const OpCall& call) const;
  Tensor transpose(const OpCall& call) const;
  Tensor concatenate(const OpCall& call) const;
  Tensor convolution(const OpCall& call) const;
  Tensor window(const OpCall& call) const;
  Tensor lookup(const OpCall& call) const;
  Tensor reshape(const OpCall& call) const;
  Tensor random(const OpCall& call) const;
  Tensor slice(const OpCall& call) const;
  Tensor broadcast(const OpCall& call) const;
  Tensor one_hot(const OpCall& call) const;
  Tensor batch_mean(const OpCall& call) const;
  Tensor assign(const OpCall& call) const;
  Tensor split_softmax(const OpCall& call, const Sharding& from, int axis) const;
  Tensor gathered(const OpCall& call) const;
  // Runs the op on local blocks (dispatch() runs every rule with no handler installed).
  Tensor computed(const OpCall& call, const std::vector<Tensor>& local) const;
  // `out` annotated with `sharding` (left unannotated when that is the data layout).
  Tensor annotated(Tensor out, const Sharding& sharding) const;
  // For each mesh axis, whether `output` is split there.
  std::vector<bool> split_axes(const Sharding& output) const;
  // `sharding` with `dims` whole on every mesh axis but the batch axis (on it too for a
  // variable: `keep_batch` false).
  Sharding whole_along(Sharding sharding, const std::vector<int>& dims, bool keep_batch = true) const;
  // The global shape of a block of `local` shape laid out as `placements`.
  Shape global_shape_of(const Shape& local, const std::vector<Placement>& placements) const;
  // Whether the batch axis (of more than one device) splits one of `dims`.
  bool batch_splits(const Sharding& sharding, const std::vector<int>& dims) const;
  // `operand` (laid out as `from`) moved to `to` for an op whose output is split over the mesh
  // axes marked in `output_split` (the batch axis always: gradients are summands there).
  Tensor moved(const Tensor& operand, const Sharding& from, const Sharding& to,
               std::vector<bool> output_split) const;

  const ShardingContext& context_;
  std::string layer_path_;
  TensorLayoutPtr output_layout_;
};

// An op that got a sharded operand it has no rule for, whose operand was gathered first.
struct GatheredOperation {
  std::string op;        // "slice"
  std::string layer;     // the layer whose call ran it: "custom/unruled"
  std::string operand;   // the variable's path, or "an activation"
  std::string sharding;  // how the operand lay
  std::string to_string() const;
};

// The gathered operations seen since the last forget_gathered_operations() (clear_session()),
// each once, in the order first seen.
std::vector<GatheredOperation> gathered_operations();
void forget_gathered_operations();

}  // namespace keras::distribution
