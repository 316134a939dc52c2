// The sharding propagator (see the header).
#include "distribution/sharding_propagator.h"

#include <algorithm>
#include <iostream>
#include <mutex>

#include "distribution/runtime.h"
#include "distribution/sharding_rules.h"

namespace keras::distribution {
namespace {

std::mutex gathered_mutex;
std::vector<GatheredOperation>& gathered_list() {
  static std::vector<GatheredOperation> list;
  return list;
}

// Notes a gathered operation the first time it is seen, with a log line on process 0.
void note_gathered(GatheredOperation operation) {
  std::lock_guard lock(gathered_mutex);
  for (const GatheredOperation& seen : gathered_list()) {
    if (seen.op == operation.op && seen.layer == operation.layer && seen.operand == operation.operand) return;
  }
  if (process_id() == 0) std::cerr << "keras: " << operation.to_string() << "\n";
  gathered_list().push_back(std::move(operation));
}

// A Partial sharding summed to replicated on those axes (annotations never hold Partial, but a
// rule must not trust that blindly).
Sharding without_partial(const Sharding& sharding) {
  return sharding.has_partial() ? sharding_rules::resolved(sharding) : sharding;
}

// Variables are the named tensors (Layer::add_weight names them by their path).
bool is_variable(const Tensor& tensor) { return !tensor.impl()->name.empty(); }

// Whether two shardings of one tensor give every process the same block (they differ at most
// on mesh axes of one device).
bool same_blocks(const Sharding& a, const Sharding& b) {
  const std::vector<std::int64_t>& sizes = a.mesh()->shape();
  for (std::size_t axis = 0; axis < sizes.size(); ++axis) {
    if (sizes[axis] > 1 && !(a.placements()[axis] == b.placements()[axis])) return false;
  }
  return true;
}

// `tensor` without its annotation: unannotated is the data layout. An op may hand back its
// operand itself (a reshape to the same shape), whose annotation must stay: then an alias.
Tensor without_annotation(Tensor tensor) {
  if (!tensor.annotation()) return tensor;
  Tensor alias = tensor.detach();
  return record_gradient(alias, "local_block", {tensor},
                         [](const Tensor& gradient) { return std::vector<Tensor>{gradient}; });
}

}  // namespace

std::string GatheredOperation::to_string() const {
  return str("ops::", op, " in layer '", layer, "' has no sharding rule for ", operand, " laid out as ",
             sharding, ": it is gathered before the op on every call");
}

std::vector<GatheredOperation> gathered_operations() {
  std::lock_guard lock(gathered_mutex);
  return gathered_list();
}

void forget_gathered_operations() {
  std::lock_guard lock(gathered_mutex);
  gathered_list().clear();
}

ShardingPropagator::ShardingPropagator(const ShardingContext& context, std::string layer_path)
    : context_(context), layer_path_(std::move(layer_path)) {}

Sharding ShardingPropagator::operand_sharding(const Tensor& operand, int output_rank) const {
  if (std::optional<Sharding> sharding = sharding_of(operand)) return without_partial(*sharding);
  bool activation = operand.rank() == output_rank && output_rank >= 1 && !is_variable(operand) &&
                    operand.dim(0) != 1;
  return activation ? context_.data_sharding(operand.shape()) : Sharding::replicated(context_.mesh, operand.shape());
}

Tensor ShardingPropagator::moved(const Tensor& operand, const Sharding& from, const Sharding& to,
                                 std::vector<bool> output_split) const {
  output_split[static_cast<std::size_t>(context_.batch_axis)] = true;
  return context_.operand(operand, from, to, output_split);
}

Tensor ShardingPropagator::dispatch(const OpCall& call) const {
  // Element-wise ops follow their rule; every other family gathers, for now.
  if (call.family == OpFamily::elementwise) return elementwise(call);
  return gathered(call);
}

Tensor ShardingPropagator::computed(const OpCall& call, const std::vector<Tensor>& local) const {
  ShardedOpScope local_blocks(nullptr);
  return call.compute(local);
}

Tensor ShardingPropagator::annotated(Tensor out, const Sharding& sharding) const {
  // The data layout needs no annotation (an unannotated activation is laid out so).
  if (sharding == context_.data_sharding(out.shape())) return without_annotation(out);
  return with_sharding(out, sharding);
}

std::vector<bool> ShardingPropagator::split_axes(const Sharding& output) const {
  std::vector<bool> split;
  for (int axis = 0; axis < context_.axes(); ++axis) split.push_back(!output.placement(axis).is_replicate());
  return split;
}

// Element-wise with broadcasting: the output lies as the first operand that has the output's
// full shape (an annotated one before an unannotated one); every other operand takes the same
// blocks along the dimensions it lines up with (right-aligned, as broadcasting aligns them) and
// is whole along the ones it is broadcast over.
Tensor ShardingPropagator::elementwise(const OpCall& call) const {
  int rank = 0;
  for (const Tensor& operand : call.operands) rank = std::max(rank, operand.rank());
  std::vector<Sharding> from;
  Shape global;
  for (const Tensor& operand : call.operands) {
    from.push_back(operand_sharding(operand, rank));
    global = from.size() == 1 ? from.back().global_shape()
                              : broadcast_shapes(global, from.back().global_shape(), call.name);
  }
  const Sharding* main = nullptr;
  for (int annotated = 1; annotated >= 0 && main == nullptr; --annotated) {
    for (std::size_t i = 0; i < from.size() && main == nullptr; ++i) {
      bool has = static_cast<bool>(call.operands[i].annotation());
      if (has == static_cast<bool>(annotated) && from[i].global_shape() == global) main = &from[i];
    }
  }
  // Every operand is smaller than the output (each broadcast along some dimension): the output
  // is replicated, the operands gathered.
  Sharding output = main ? Sharding(context_.mesh, main->placements(), global)
                         : Sharding::replicated(context_.mesh, global);
  std::vector<bool> output_split = split_axes(output);
  std::vector<Tensor> local;
  for (std::size_t i = 0; i < from.size(); ++i) {
    const Shape& shape = from[i].global_shape();
    const int offset = rank - static_cast<int>(shape.size());
    std::vector<Placement> placements;
    for (int axis = 0; axis < context_.axes(); ++axis) {
      const Placement& placement = output.placement(axis);
      int dim = placement.is_shard() ? placement.dim() - offset : -1;
      bool lines_up = dim >= 0 && shape[static_cast<std::size_t>(dim)] == global[static_cast<std::size_t>(placement.dim())];
      placements.push_back(lines_up ? Placement::shard(dim) : Placement::replicate());
    }
    Sharding target(context_.mesh, std::move(placements), shape);
    local.push_back(moved(call.operands[i], from[i], target, output_split));
  }
  return annotated(computed(call, local), output);
}

// No rule: variables gathered whole, activations to the data layout (the batch stays split),
// then the op runs as on one process; the output is in the data layout.
Tensor ShardingPropagator::gathered(const OpCall& call) const {
  std::vector<Tensor> local;
  std::vector<bool> output_split(static_cast<std::size_t>(context_.axes()), false);
  for (const Tensor& operand : call.operands) {
    std::optional<Sharding> sharding = sharding_of(operand);
    if (!sharding) {
      local.push_back(operand);
      continue;
    }
    std::vector<Placement> placements(static_cast<std::size_t>(context_.axes()), Placement::replicate());
    const Placement& batch = sharding->placement(context_.batch_axis);
    bool activation = batch.is_shard() && batch.dim() == 0 && !is_variable(operand);
    if (activation) placements[static_cast<std::size_t>(context_.batch_axis)] = Placement::shard(0);
    Sharding target(context_.mesh, std::move(placements), sharding->global_shape());
    Tensor whole = moved(operand, *sharding, target, output_split);
    if (!same_blocks(target, *sharding)) {
      note_gathered({call.name, layer_path_, is_variable(operand) ? str("'", operand.name(), "'") : "an activation",
                     sharding->to_string()});
    }
    local.push_back(whole);  // the ops below run with no handler: they read no annotation
  }
  return without_annotation(computed(call, local));
}

}  // namespace keras::distribution
