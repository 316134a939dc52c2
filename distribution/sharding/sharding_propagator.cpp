// The sharding propagator (see the header).
#include "distribution/sharding/sharding_propagator.h"

#include <algorithm>
#include <iostream>
#include <optional>
#include <string_view>
#include <mutex>

#include "distribution/runtime/batch_shard.h"
#include "distribution/sharding/redistribute.h"
#include "distribution/runtime/runtime.h"
#include "distribution/sharding/sharding_rules.h"
#include "engine/ops.h"

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

// Annotations never hold Partial (every rule sums its Partial results before annotating); one
// that did would be summands read as whole values: said, never computed on.
Sharding checked_annotation(const Sharding& sharding) {
  if (sharding.has_partial()) {
    throw ValueError(str("a tensor annotated as ", sharding.to_string(), " reached an op: annotations hold ",
                         "no Partial placement (it must be summed with redistribute() first)"));
  }
  return sharding;
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
  alias.set_annotation(nullptr);
  return record_gradient(alias, "local_block", {tensor},
                         [](const Tensor& gradient) { return std::vector<Tensor>{gradient}; });
}

// Whether shapes `a` and `b` broadcast together (NumPy's rule).
bool broadcastable(const Shape& a, const Shape& b) {
  for (std::size_t i = 1; i <= std::min(a.size(), b.size()); ++i) {
    const std::int64_t x = a[a.size() - i], y = b[b.size() - i];
    if (x != y && x != 1 && y != 1) return false;
  }
  return true;
}

// Einsum labels for a contraction: matmul's from the ranks ("aby,yz->abz", batched
// "abxy,abyz->abxz"), einsum's from its equation with "..." spelled out. Nothing for an
// equation the rule cannot read (implicit output, "..." in both operands).
std::optional<sharding_rules::Contraction> contraction_labels(const OpCall& call, int a_rank, int b_rank) {
  if (call.equation.empty()) {
    if (a_rank < 2 || b_rank < 2 || (b_rank > 2 && b_rank != a_rank)) return std::nullopt;
    std::string leading;
    for (int dim = 0; dim + 2 < a_rank; ++dim) leading += static_cast<char>('a' + dim);
    if (b_rank == 2) return sharding_rules::Contraction{leading + "xy", "yz", leading + "xz"};
    return sharding_rules::Contraction{leading + "xy", leading + "yz", leading + "xz"};
  }
  std::string equation;
  for (char c : call.equation) {
    if (c != ' ') equation += c;
  }
  std::size_t comma = equation.find(','), arrow = equation.find("->");
  if (comma == std::string::npos || arrow == std::string::npos || arrow < comma) return std::nullopt;
  std::string a = equation.substr(0, comma), b = equation.substr(comma + 1, arrow - comma - 1);
  std::string out = equation.substr(arrow + 2);
  const bool a_has = a.find("...") != std::string::npos, b_has = b.find("...") != std::string::npos;
  if (a_has && b_has) return std::nullopt;
  if (a_has || b_has) {
    std::string& with = a_has ? a : b;
    int spelled = static_cast<int>(with.size()) - 3;
    int missing = (a_has ? a_rank : b_rank) - spelled;
    if (missing < 0 || missing > 8 || out.find("...") == std::string::npos) return std::nullopt;
    std::string letters;
    for (int i = 0; i < missing; ++i) letters += static_cast<char>('A' + i);  // einsum's are lower case
    with.replace(with.find("..."), 3, letters);
    out.replace(out.find("..."), 3, letters);
  }
  if (static_cast<int>(a.size()) != a_rank || static_cast<int>(b.size()) != b_rank) return std::nullopt;
  return sharding_rules::Contraction{a, b, out};
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

ShardingPropagator::ShardingPropagator(const ShardingContext& context, std::string layer_path,
                                       TensorLayoutPtr output_layout)
    : context_(context), layer_path_(std::move(layer_path)), output_layout_(std::move(output_layout)) {}

Sharding ShardingPropagator::operand_sharding(const Tensor& operand, int output_rank, std::int64_t rows) const {
  if (std::optional<Sharding> sharding = sharding_of(operand)) return checked_annotation(*sharding);
  bool activation = operand.rank() == output_rank && output_rank >= 1 && !is_variable(operand) &&
                    (rows < 0 || operand.dim(0) == rows);
  return activation ? context_.data_sharding(operand.shape()) : Sharding::replicated(context_.mesh, operand.shape());
}

Tensor ShardingPropagator::moved(const Tensor& operand, const Sharding& from, const Sharding& to,
                                 std::vector<bool> output_split) const {
  output_split[static_cast<std::size_t>(context_.batch_axis)] = true;
  return context_.operand(operand, from, to, output_split);
}

Sharding ShardingPropagator::summed(const Sharding& product) const {
  if (!product.has_partial()) return product;
  if (output_layout_ && output_layout_->axes().size() == product.global_shape().size()) {
    try {
      Sharding preferred = context_.activation_target(*output_layout_, product, layer_path_ + "/output");
      return sharding_rules::resolved(product, &preferred);
    } catch (const ValueError&) {
      // A layout that cannot split this intermediate product is no preference for it; the
      // layer's output is checked against it when it is placed.
    }
  }
  return sharding_rules::resolved(product);
}

Tensor ShardingPropagator::summed_output(Tensor out, const Sharding& lying) const {
  out = without_annotation(out);
  Sharding target = summed(lying);
  return annotated(target == lying ? out : redistribute(out, lying, target), target);
}

Tensor ShardingPropagator::dispatch(const OpCall& call) const {
  // Moving operands runs ops too (slices, transposes): on local blocks, with no handler.
  ShardedOpScope local_blocks(nullptr);
  switch (call.family) {
    case OpFamily::elementwise:
      return elementwise(call);
    case OpFamily::contraction:
      return contraction(call);
    case OpFamily::reduction:
    case OpFamily::along_axis:
      return along_axes(call);
    case OpFamily::transpose:
      return transpose(call);
    case OpFamily::concatenate:
      return concatenate(call);
    case OpFamily::convolution:
      return convolution(call);
    case OpFamily::window:
      return window(call);
    case OpFamily::lookup:
      return lookup(call);
    case OpFamily::reshape:
      return reshape(call);
    case OpFamily::random:
      return random(call);
    case OpFamily::slice:
      return slice(call);
    case OpFamily::broadcast:
      return broadcast(call);
    case OpFamily::one_hot:
      return one_hot(call);
    case OpFamily::batch:
      return batch_mean(call);
    case OpFamily::assign:
      return assign(call);
    case OpFamily::other:
      break;
  }
  return gathered(call);
}

Tensor ShardingPropagator::computed(const OpCall& call, const std::vector<Tensor>& local) const {
  return call.compute(local);  // dispatch() installed no handler
}

Tensor ShardingPropagator::annotated(Tensor out, const Sharding& sharding) const {
  // An op may hand back its operand (a reshape to the same shape) or a copy of an operand's
  // annotation (element-wise ops): the annotation is set on an alias of its own.
  out = without_annotation(out);
  // The data layout needs no annotation (an unannotated activation is laid out so).
  if (sharding == context_.data_sharding(out.shape())) return out;
  return with_sharding(out, sharding);
}

std::vector<bool> ShardingPropagator::split_axes(const Sharding& output) const {
  std::vector<bool> split;
  for (int axis = 0; axis < context_.axes(); ++axis) split.push_back(!output.placement(axis).is_replicate());
  return split;
}

Sharding ShardingPropagator::whole_along(Sharding sharding, const std::vector<int>& dims, bool keep_batch) const {
  for (int axis = 0; axis < context_.axes(); ++axis) {
    const Placement& placement = sharding.placement(axis);
    if ((keep_batch && axis == context_.batch_axis) || !placement.is_shard()) continue;
    if (std::find(dims.begin(), dims.end(), placement.dim()) != dims.end()) {
      sharding = sharding.with(axis, Placement::replicate());
    }
  }
  return sharding;
}

Shape ShardingPropagator::global_shape_of(const Shape& local, const std::vector<Placement>& placements) const {
  Shape global = local;
  for (int axis = 0; axis < context_.axes(); ++axis) {
    const Placement& placement = placements[static_cast<std::size_t>(axis)];
    if (placement.is_shard()) global[static_cast<std::size_t>(placement.dim())] *= context_.mesh->shape()[static_cast<std::size_t>(axis)];
  }
  return global;
}

bool ShardingPropagator::batch_splits(const Sharding& sharding, const std::vector<int>& dims) const {
  const Placement& batch = sharding.placement(context_.batch_axis);
  return context_.batch_axis_size() > 1 && batch.is_shard() &&
         std::find(dims.begin(), dims.end(), batch.dim()) != dims.end();
}

// matmul and einsum by the contraction rule (sharding_rules::contraction): the first operand
// is read as the activation, the second as the kernel; a Partial product is summed to
// replicated (an all-reduce) before it is annotated.
Tensor ShardingPropagator::contraction(const OpCall& call) const {
  const Tensor& x = call.operands[0];
  const Tensor& kernel = call.operands[1];
  std::optional<sharding_rules::Contraction> labels = contraction_labels(call, x.rank(), kernel.rank());
  if (!labels) return gathered(call);
  Sharding x_from = operand_sharding(x, x.rank());
  // An unannotated second operand is an activation only where it shares the first operand's
  // batch dimension (attention scores, q @ k); otherwise it is a constant or a replicated weight.
  Sharding kernel_from = sharding_of(kernel) ? operand_sharding(kernel, kernel.rank())
                         : !is_variable(kernel) && kernel.rank() >= 3 && !labels->kernel.empty() &&
                                   labels->kernel[0] == labels->x[0] && x_from.placement(context_.batch_axis).is_shard()
                             ? context_.data_sharding(kernel.shape())
                             : Sharding::replicated(context_.mesh, kernel.shape());
  sharding_rules::OperationSharding rule = sharding_rules::contraction(*labels, x_from, kernel_from);
  std::vector<bool> output_split = split_axes(rule.output);
  std::vector<Tensor> local = {moved(x, x_from, rule.inputs[0], output_split),
                               moved(kernel, kernel_from, rule.inputs[1], output_split)};
  return summed_output(computed(call, local), rule.output);
}

// Reductions, softmax and argmax: the reduced (or normalised) dimensions are made whole on every
// mesh axis but the batch axis, the op runs on the blocks, the other placements are kept. Over
// the batch dimension the result is each process's own (as a replica's in Keras), as it is for
// an unannotated activation: such an output is left unannotated.
Tensor ShardingPropagator::along_axes(const OpCall& call) const {
  const Tensor& x = call.operands[0];
  Sharding from = operand_sharding(x, x.rank());
  std::vector<int> dims;
  if (call.axes.empty()) {
    for (int dim = 0; dim < x.rank(); ++dim) dims.push_back(dim);
  } else {
    for (std::int64_t axis : call.axes) {
      std::int64_t normal = axis < 0 ? axis + x.rank() : axis;
      if (normal < 0 || normal >= x.rank()) return gathered(call);  // the op's own error
      dims.push_back(static_cast<int>(normal));
    }
  }
  const std::string_view name = call.name;
  if (call.family == OpFamily::reduction && (name == "sum" || name == "mean") && !batch_splits(from, dims)) {
    // A sum over split dimensions is each process's sum of its block, summed over those axes
    // (a mean the same, each block's mean weighted by its share): the operand stays split and
    // only the (smaller) result travels.
    Sharding partial = sharding_rules::reduction(from, dims, call.keepdims);
    if (partial.has_partial()) {
      Tensor out = without_annotation(computed(call, {x}));
      if (name == "mean") {
        double share = 1.0;
        for (int axis = 0; axis < context_.axes(); ++axis) {
          if (partial.placement(axis).is_partial()) share /= static_cast<double>(context_.mesh->shape()[static_cast<std::size_t>(axis)]);
        }
        out = out * share;
      }
      Sharding whole = sharding_rules::resolved(partial);
      return annotated(redistribute(out, partial, whole), whole);
    }
  }
  if (call.family == OpFamily::along_axis && (name == "softmax" || name == "log_softmax") &&
      dims.size() == 1 && !batch_splits(from, dims) && from.axis_sharding(dims[0]) >= 0) {
    return split_softmax(call, from, dims[0]);
  }
  Sharding target = whole_along(from, dims);
  Tensor local = moved(x, from, target, split_axes(target));
  Tensor out = computed(call, {local});
  if (batch_splits(target, dims)) return without_annotation(out);
  if (call.family == OpFamily::along_axis && name.find("arg") == std::string_view::npos) {
    return annotated(out, target);  // softmax, log_softmax: the shape is kept
  }
  const bool keep = call.family == OpFamily::reduction && call.keepdims;
  return annotated(out, sharding_rules::reduction(target, dims, keep));
}

// A transpose maps each split dimension to its new place; one that moves the batch away from
// dimension 0 is gathered (an activation's batch is its dimension 0).
Tensor ShardingPropagator::transpose(const OpCall& call) const {
  const Tensor& x = call.operands[0];
  Sharding from = operand_sharding(x, x.rank());
  std::vector<std::int64_t> permutation = call.axes;
  if (permutation.empty()) {
    for (int dim = x.rank() - 1; dim >= 0; --dim) permutation.push_back(dim);
  }
  if (static_cast<int>(permutation.size()) != x.rank()) return gathered(call);  // the op's own error
  std::vector<int> position(static_cast<std::size_t>(x.rank()), -1);
  Shape shape;
  for (std::size_t j = 0; j < permutation.size(); ++j) {
    std::int64_t dim = permutation[j] < 0 ? permutation[j] + x.rank() : permutation[j];
    if (dim < 0 || dim >= x.rank() || position[static_cast<std::size_t>(dim)] >= 0) return gathered(call);
    position[static_cast<std::size_t>(dim)] = static_cast<int>(j);
    shape.push_back(from.global_shape()[static_cast<std::size_t>(dim)]);
  }
  if (position[0] != 0 && batch_splits(from, {0})) return gathered(call);
  std::vector<Placement> placements;
  for (const Placement& placement : from.placements()) {
    placements.push_back(placement.is_shard() ? Placement::shard(position[static_cast<std::size_t>(placement.dim())])
                                              : placement);
  }
  Tensor out = computed(call, {x});
  return annotated(out, Sharding(context_.mesh, std::move(placements), std::move(shape)));
}

// Tensors joined along an axis: that axis is made whole (a concatenation of blocks is not the
// block of the concatenation), every other dimension lies as in the first annotated operand.
Tensor ShardingPropagator::concatenate(const OpCall& call) const {
  const int rank = call.operands[0].rank();
  std::int64_t axis = call.axes.empty() ? 0 : call.axes[0];
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return gathered(call);  // the op's own error
  std::vector<Sharding> from;
  const Sharding* leader = nullptr;
  for (const Tensor& operand : call.operands) {
    if (operand.rank() != rank) return gathered(call);
    from.push_back(operand_sharding(operand, rank));
  }
  for (std::size_t i = 0; i < from.size() && leader == nullptr; ++i) {
    if (call.operands[i].annotation()) leader = &from[i];
  }
  Sharding layout = whole_along(*leader, {static_cast<int>(axis)});
  if (batch_splits(layout, {static_cast<int>(axis)})) return gathered(call);
  std::vector<bool> output_split = split_axes(layout);
  std::vector<Tensor> local;
  Shape shape = layout.global_shape();
  shape[static_cast<std::size_t>(axis)] = 0;
  for (std::size_t i = 0; i < from.size(); ++i) {
    Shape own = from[i].global_shape();
    for (int dim = 0; dim < rank; ++dim) {
      if (dim != axis && own[static_cast<std::size_t>(dim)] != layout.global_shape()[static_cast<std::size_t>(dim)]) {
        return gathered(call);  // shapes that do not fit: the op's own error
      }
    }
    shape[static_cast<std::size_t>(axis)] += own[static_cast<std::size_t>(axis)];
    local.push_back(moved(call.operands[i], from[i], Sharding(context_.mesh, layout.placements(), own), output_split));
  }
  Tensor out = computed(call, local);
  return annotated(out, Sharding(context_.mesh, layout.placements(), std::move(shape)));
}

// Element-wise with broadcasting: the output lies as the first operand that has the output's
// full shape (an annotated one before an unannotated one); every other operand takes the same
// blocks along the dimensions it lines up with (right-aligned, as broadcasting aligns them) and
// is whole along the ones it is broadcast over.
Tensor ShardingPropagator::elementwise(const OpCall& call) const {
  int rank = 0;
  for (const Tensor& operand : call.operands) rank = std::max(rank, operand.rank());
  // The op's rows: an unannotated operand with fewer (one, broadcast) is not an activation.
  std::int64_t rows = 0;
  for (const Tensor& operand : call.operands) {
    if (operand.rank() == rank && rank >= 1) rows = std::max(rows, operand.dim(0));
  }
  // The annotated operands say what the output's shape is: an unannotated operand that the data
  // layout would not fit beside them (a statistic of whole vectors, (C,) beside a replicated
  // (C,)) is whole, not this process's rows.
  std::optional<Shape> annotated_global;
  for (const Tensor& operand : call.operands) {
    if (!operand.annotation()) continue;
    Shape shape = checked_annotation(*sharding_of(operand)).global_shape();
    annotated_global = annotated_global ? broadcast_shapes(*annotated_global, shape, call.name) : shape;
  }
  std::vector<Sharding> from;
  Shape global;
  for (const Tensor& operand : call.operands) {
    Sharding sharding = operand_sharding(operand, rank, rows);
    if (!operand.annotation() && annotated_global && !broadcastable(sharding.global_shape(), *annotated_global)) {
      sharding = Sharding::replicated(context_.mesh, operand.shape());
    }
    from.push_back(sharding);
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

// conv (channels_last images, kernel (height, width, channels / groups, filters)) as the
// contraction "byxi,hwio->byxo": a window spans rows and columns of the image, so those are
// made whole (and the kernel's window dimensions); grouped channels too, since a process's
// block of channels would not be whole groups. Column-parallel then splits the filters,
// row-parallel sums the input channels' parts (Partial, summed as the contraction's).
Tensor ShardingPropagator::convolution(const OpCall& call) const {
  const Tensor& x = call.operands[0];
  const Tensor& kernel = call.operands[1];
  if (x.rank() != 4 || kernel.rank() != 4) return gathered(call);  // the op's own error
  Sharding x_from = operand_sharding(x, 4);
  Sharding kernel_from = sharding_of(kernel) ? operand_sharding(kernel, 4) : Sharding::replicated(context_.mesh, kernel.shape());
  const bool grouped = x_from.global_shape()[3] != kernel_from.global_shape()[2];
  Sharding x_target = whole_along(x_from, grouped ? std::vector<int>{1, 2, 3} : std::vector<int>{1, 2});
  Sharding kernel_target =
      whole_along(kernel_from, grouped ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0, 1}, /*keep_batch=*/false);
  // (Grouped, the kernel is whole: it is given the input's channel count so that the labels agree.)
  sharding_rules::OperationSharding rule =
      sharding_rules::contraction({"byxi", "hwio", "byxo"}, x_target,
                                  Sharding(context_.mesh, kernel_target.placements(),
                                           {kernel_target.global_shape()[0], kernel_target.global_shape()[1],
                                            x_target.global_shape()[3], kernel_target.global_shape()[3]}));
  std::vector<bool> output_split = split_axes(rule.output);
  std::vector<Tensor> local = {moved(x, x_from, rule.inputs[0], output_split),
                               moved(kernel, kernel_from,
                                     Sharding(context_.mesh, rule.inputs[1].placements(), kernel_from.global_shape()),
                                     output_split)};
  Tensor product = computed(call, local);
  // The contraction's labels give the output the input's height and width; the op's stride and
  // padding give it its own.
  return summed_output(product, Sharding(context_.mesh, rule.output.placements(),
                                         global_shape_of(product.shape(), rule.output.placements())));
}

// max_pool and average_pool: every channel of every image on its own, a window over rows and
// columns: those two made whole, the batch and channel splits kept.
Tensor ShardingPropagator::window(const OpCall& call) const {
  const Tensor& x = call.operands[0];
  if (x.rank() != 4) return gathered(call);  // the op's own error
  Sharding from = operand_sharding(x, 4);
  Sharding target = whole_along(from, {1, 2});
  Tensor out = computed(call, {moved(x, from, target, split_axes(target))});
  return annotated(out, Sharding(context_.mesh, target.placements(), global_shape_of(out.shape(), target.placements())));
}

// take(table, indices, 0) of a (rows, features) table by sharding_rules::lookup: the table is
// whole where the indices differ between processes; split by features, the output is split
// the same way; split by rows, each process looks up the rows it holds (the others as row 0,
// zeroed) and the Partial output is summed, which adds the one process's row that holds each
// index.
Tensor ShardingPropagator::lookup(const OpCall& call) const {
  const Tensor& table = call.operands[0];
  const Tensor& indices = call.operands[1];
  const std::int64_t axis = call.axes.empty() ? 0 : call.axes[0];
  if (table.rank() != 2 || (axis != 0 && axis != -2)) return gathered(call);
  Sharding index_from = operand_sharding(indices, indices.rank());
  Sharding table_from = sharding_of(table) ? operand_sharding(table, 2) : Sharding::replicated(context_.mesh, table.shape());
  sharding_rules::OperationSharding rule = sharding_rules::lookup(index_from, table_from);
  const Sharding& wanted = rule.inputs[1];
  std::vector<bool> output_split = split_axes(rule.output);
  Tensor local_table = moved(table, table_from, wanted, output_split);
  Tensor looked_up;
  if (wanted.axis_sharding(0) < 0) {
    looked_up = computed(call, {local_table, indices});
  } else {
    // Built on the table's device, so that a step on a GPU does not wait to read its indices.
    auto [starts, sizes] = wanted.block(context_.coordinates);
    Device device = local_table.device();
    Tensor global_indices = ops::cast(indices.to(device), int64);
    Tensor first = Tensor::full({}, static_cast<double>(starts[0]), int64, device);
    Tensor past_last = Tensor::full({}, static_cast<double>(starts[0] + sizes[0]), int64, device);
    Tensor held = ops::logical_and(ops::greater_equal(global_indices, first), ops::less(global_indices, past_last));
    Tensor local_indices = ops::where(held, global_indices - first, Tensor::zeros({}, int64, device));
    Tensor mask = ops::expand_dims(ops::cast(held, local_table.dtype()), -1);
    looked_up = computed(call, {local_table, local_indices}) * mask;
  }
  return summed_output(looked_up, rule.output);
}

// reshape, with the target in the caller's terms (whole, but for the batch: this process's
// rows). Dimensions are matched in groups whose sizes multiply to the same number (the input's
// (8, 16) and the output's (8, 4, 4): {8} -> {8}, {16} -> {4, 4}); a split dimension keeps its
// split when it is the outermost of its group (no split or size-1 dimension before it) and the
// group's outermost output dimension divides by the split, so that every process's block is a
// block of the output ((.., 16) split 2 ways -> (.., 4, 4) with the 4 heads split; the reverse
// merges them). The batch must stay dimension 0, whole. Otherwise the operand is gathered.
Tensor ShardingPropagator::reshape(const OpCall& call) const {
  const Tensor& x = call.operands[0];
  Sharding from = operand_sharding(x, x.rank());
  Shape logical = from.global_shape();
  const Placement& batch = from.placement(context_.batch_axis);
  const bool batch_split = batch.is_shard() && context_.batch_axis_size() > 1;
  if (batch_split && batch.dim() != 0) return gathered(call);
  if (batch_split) logical[0] = x.dim(0);
  // The target, its -1 inferred (an impossible one is the op's own error, from gathered()).
  Shape target = call.shape;
  std::int64_t known = 1, elements = shape_size(logical);
  int unknown = -1;
  for (int i = 0; i < static_cast<int>(target.size()); ++i) {
    if (target[static_cast<std::size_t>(i)] == -1 && unknown < 0) {
      unknown = i;
    } else if (target[static_cast<std::size_t>(i)] < 0) {
      return gathered(call);
    } else {
      known *= target[static_cast<std::size_t>(i)];
    }
  }
  if (unknown >= 0) {
    if (known == 0 || elements % known != 0) return gathered(call);
    target[static_cast<std::size_t>(unknown)] = elements / known;
  }
  if (shape_size(target) != elements || logical.empty() || target.empty()) return gathered(call);
  for (std::int64_t size : logical) {
    if (size == 0) return gathered(call);
  }
  // Groups: input dims [group_i, i) and output dims [group_j, j) of equal products.
  std::vector<int> output_of(logical.size(), -1);      // the outermost output dim of its group
  std::vector<bool> outermost(logical.size(), false);  // no dim of size > 1 before it in its group
  std::size_t i = 0, j = 0;
  while (i < logical.size() || j < target.size()) {
    const std::size_t group_i = i, group_j = j;
    std::int64_t in = 1, out = 1;
    if (i < logical.size()) in *= logical[i++];
    if (j < target.size()) out *= target[j++];
    while (in != out) {
      if (in < out && i < logical.size()) {
        in *= logical[i++];
      } else if (in > out && j < target.size()) {
        out *= target[j++];
      } else {
        return gathered(call);  // cannot happen with equal element counts
      }
    }
    bool seen_size = false;
    for (std::size_t d = group_i; d < i; ++d) {
      output_of[d] = group_j < j ? static_cast<int>(group_j) : -1;
      outermost[d] = !seen_size;
      seen_size = seen_size || logical[d] > 1;
    }
  }
  std::vector<Placement> placements;
  Shape local_target = target, global_target = target;
  for (int axis = 0; axis < context_.axes(); ++axis) {
    const Placement& placement = from.placement(axis);
    if (!placement.is_shard()) {
      placements.push_back(placement);
      continue;
    }
    const auto dim = static_cast<std::size_t>(placement.dim());
    const int to = output_of[dim];
    const std::int64_t splits = context_.mesh->shape()[static_cast<std::size_t>(axis)];
    if (axis == context_.batch_axis) {
      if (dim != 0 || to != 0 || target[0] != logical[0]) return gathered(call);  // the batch stays put
      global_target[0] *= splits;
      placements.push_back(Placement::shard(0));
      continue;
    }
    if (to < 0 || !outermost[dim] || target[static_cast<std::size_t>(to)] % splits != 0) return gathered(call);
    local_target[static_cast<std::size_t>(to)] /= splits;
    placements.push_back(Placement::shard(to));
  }
  Sharding output(context_.mesh, std::move(placements), global_target);
  return annotated(ops::reshape(x, local_target), output);
}

// No rule: variables gathered whole, activations to the data layout (the batch stays split),
// then the op runs as on one process; the output is in the data layout.
// Dropout's draw: each process draws its block of the mask one process would draw for the whole
// batch and the whole activation: rows from this process's place in the global batch (the
// step's batch rows), the other dimensions from the operand's sharding. Nothing moves.
Tensor ShardingPropagator::random(const OpCall& call) const {
  const Tensor& x = call.operands[0];
  Sharding sharding = operand_sharding(x, x.rank());
  Tensor local = without_annotation(x);
  Shape whole = sharding.global_shape();
  Shape starts(whole.size(), 0);
  if (!whole.empty()) {
    starts = sharding.block(context_.coordinates).first;
    const BatchShard::Rows* rows = BatchShard::step_rows();
    const bool batch_rows = rows != nullptr && local.dim(0) == rows->local;
    whole[0] = batch_rows ? rows->total : local.dim(0);
    starts[0] = batch_rows ? rows->offset : 0;
  }
  return annotated(call.draw_block({local}, whole, starts), sharding);
}

// A slice keeps the splits of the dimensions it takes whole; a dimension it cuts is made whole
// first. The batch rows are this process's own: a cut of them is taken from its rows.
Tensor ShardingPropagator::slice(const OpCall& call) const {
  const Tensor& x = call.operands[0];
  const Shape& starts = call.axes;
  if (static_cast<int>(starts.size()) != x.rank() || static_cast<int>(call.shape.size()) != x.rank()) {
    return gathered(call);  // the op's own error
  }
  Sharding from = operand_sharding(x, x.rank());
  const bool batch_split = batch_splits(from, {0});
  Shape logical = from.global_shape();
  if (batch_split) logical[0] = x.dim(0);
  Shape sizes = call.shape;
  std::vector<int> cut;
  for (int dim = 0; dim < x.rank(); ++dim) {
    auto d = static_cast<std::size_t>(dim);
    if (sizes[d] == -1) sizes[d] = logical[d] - starts[d];
    if (starts[d] < 0 || sizes[d] < 0 || starts[d] + sizes[d] > logical[d]) return gathered(call);  // its error
    if (starts[d] != 0 || sizes[d] != logical[d]) cut.push_back(dim);
  }
  Sharding target = whole_along(from, cut);
  Tensor local = moved(x, from, target, split_axes(target));
  Shape local_starts = starts, local_sizes = sizes, global = sizes;
  for (int axis = 0; axis < context_.axes(); ++axis) {
    const Placement& placement = target.placement(axis);
    if (!placement.is_shard()) continue;
    auto d = static_cast<std::size_t>(placement.dim());
    const std::int64_t splits = context_.mesh->shape()[static_cast<std::size_t>(axis)];
    if (axis == context_.batch_axis && d == 0) {
      global[0] *= splits;  // the rows as the batch records them: local rows x processes
    } else {
      local_starts[d] = 0;
      local_sizes[d] = local.dim(static_cast<int>(d));
    }
  }
  Tensor out = ops::slice(local, local_starts, local_sizes);
  return annotated(out, Sharding(context_.mesh, target.placements(), std::move(global)));
}

// broadcast_to: the operand's splits move with its dimensions (numbered from the right); a
// dimension it broadcasts has size 1 and is never split.
Tensor ShardingPropagator::broadcast(const OpCall& call) const {
  const Tensor& x = call.operands[0];
  Sharding from = operand_sharding(x, x.rank());
  const Shape& target = call.shape;
  const int offset = static_cast<int>(target.size()) - x.rank();
  if (offset < 0) return gathered(call);  // the op's own error
  Shape local_target = target, global = target;
  std::vector<Placement> placements;
  for (int axis = 0; axis < context_.axes(); ++axis) {
    const Placement& placement = from.placement(axis);
    if (!placement.is_shard()) {
      placements.push_back(placement);
      continue;
    }
    const auto d = static_cast<std::size_t>(placement.dim() + offset);
    const std::int64_t splits = context_.mesh->shape()[static_cast<std::size_t>(axis)];
    if (axis == context_.batch_axis && context_.batch_axis_size() > 1) {
      if (d != 0) return gathered(call);  // the batch stays the leading dimension
      global[0] *= splits;
    } else {
      if (target[d] % splits != 0) return gathered(call);
      local_target[d] /= splits;
    }
    placements.push_back(Placement::shard(static_cast<int>(d)));
  }
  Tensor out = ops::broadcast_to(without_annotation(x), local_target);
  return annotated(out, Sharding(context_.mesh, std::move(placements), std::move(global)));
}

// one_hot: the indices' splits are kept; the new depth dimension is whole.
Tensor ShardingPropagator::one_hot(const OpCall& call) const {
  const Tensor& indices = call.operands[0];
  Sharding from = operand_sharding(indices, indices.rank());
  Shape global = from.global_shape();
  global.push_back(call.shape.at(0));
  Tensor out = computed(call, {without_annotation(indices)});
  return annotated(out, Sharding(context_.mesh, from.placements(), std::move(global)));
}

// softmax and log_softmax along a split axis, without gathering it (Megatron's vocabulary-
// parallel softmax): each process's row maxima are gathered (a small all-gather) for a common
// shift, each process sums the exponentials of its block, the sums are all-reduced, and every
// process normalises its block. Two collectives of one value per row, where gathering the axis
// would move the whole tensor; the output keeps the operand's split.
Tensor ShardingPropagator::split_softmax(const OpCall& call, const Sharding& from, int axis) const {
  const bool log = std::string_view(call.name) == "log_softmax";
  Tensor local = without_annotation(call.operands[0]);
  const std::vector<bool> output_split = split_axes(from);
  // The mesh axes that split `axis`, and the shape of one value per row.
  std::vector<int> splitting;
  for (int mesh_axis = 0; mesh_axis < context_.axes(); ++mesh_axis) {
    const Placement& placement = from.placement(mesh_axis);
    if (placement.is_shard() && placement.dim() == axis) splitting.push_back(mesh_axis);
  }
  Shape per_row_global = from.global_shape();
  per_row_global[static_cast<std::size_t>(axis)] = 1;
  Tensor shift;
  {
    // The shift is a constant for the gradient (the result does not depend on it).
    NoGradGuard constant;
    Tensor maxima = ops::max(local, {axis}, /*keepdims=*/true);
    Shape gathered_shape = per_row_global;
    std::vector<Placement> placements = from.placements();
    for (int mesh_axis : splitting) {
      gathered_shape[static_cast<std::size_t>(axis)] *= context_.mesh->shape()[static_cast<std::size_t>(mesh_axis)];
    }
    Sharding each(context_.mesh, placements, gathered_shape);
    Sharding all = whole_along(each, {axis});
    shift = ops::max(redistribute(maxima, each, all), {axis}, /*keepdims=*/true);
  }
  Tensor shifted = local - shift;
  std::vector<Placement> partial = from.placements();
  for (int mesh_axis : splitting) partial[static_cast<std::size_t>(mesh_axis)] = Placement::partial();
  Sharding summands(context_.mesh, partial, per_row_global);
  Sharding sums_whole = sharding_rules::resolved(summands);
  Tensor sums = redistribute(ops::sum(ops::exp(shifted), {axis}, /*keepdims=*/true), summands, sums_whole);
  // The sums are used by every process's block: their gradient is summed over the splitting axes.
  sums = context_.operand(sums, sums_whole, sums_whole, output_split);
  Tensor out = log ? shifted - ops::log(sums) : ops::exp(shifted) / sums;
  return annotated(out, from);
}

// batch_mean: each process sums its block over the reduced dimensions, the sums are all-reduced
// over the batch axis (and over any axis that splits another reduced dimension) and divided by
// the count of the global batch (the step's rows). Every process's loss depends on the result,
// so its gradient is summed over the batch axis on the way back.
Tensor ShardingPropagator::batch_mean(const OpCall& call) const {
  const Tensor& x = call.operands[0];
  Sharding from = operand_sharding(x, x.rank());
  std::vector<int> dims;
  for (std::int64_t axis : call.axes) dims.push_back(static_cast<int>(axis < 0 ? axis + x.rank() : axis));
  Shape logical = from.global_shape();
  const BatchShard::Rows* rows = BatchShard::step_rows();
  if (rows != nullptr && x.dim(0) == rows->local) logical[0] = rows->total;
  double count = 1.0;
  for (int dim : dims) count *= static_cast<double>(logical[static_cast<std::size_t>(dim)]);
  Sharding partial = sharding_rules::reduction(from, dims, call.keepdims);
  Sharding whole = sharding_rules::resolved(partial);
  Tensor local_sum = ops::sum(without_annotation(x), call.axes, call.keepdims);
  Tensor summed = redistribute(local_sum, partial, whole) * (1.0 / count);
  if (context_.batch_axis_size() > 1) summed = identity_with_summed_grad(summed, context_.group(context_.batch_axis));
  return annotated(summed, whole);
}

// Tensor::assign: the new value moves to the target's layout (a variable's, from its creation;
// an unannotated value is whole), then each process copies its block. No gradient: assign is
// outside autograd.
Tensor ShardingPropagator::assign(const OpCall& call) const {
  const Tensor& target = call.operands[0];
  const Tensor& source = call.operands[1];
  Sharding to = sharding_of(target) ? checked_annotation(*sharding_of(target))
                                    : Sharding::replicated(context_.mesh, target.shape());
  Sharding from = sharding_of(source) ? checked_annotation(*sharding_of(source))
                                      : Sharding::replicated(context_.mesh, source.shape());
  if (from.global_shape() != to.global_shape()) {
    throw ShapeError(str("cannot assign a tensor of shape ", shape_to_string(from.global_shape()), " to '",
                         target.name(), "' of shape ", shape_to_string(to.global_shape())));
  }
  NoGradGuard outside_autograd;
  Tensor value = without_annotation(source);
  if (!(from == to)) value = redistribute(value, from, to);
  return computed(call, {without_annotation(target), value});
}

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
