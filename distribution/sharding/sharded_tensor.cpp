// Shardings carried on tensors and the model-parallel context of the layers (see the header).
#include "distribution/sharding/sharded_tensor.h"

#include "distribution/runtime/runtime.h"
#include "distribution/sharding/step_context.h"
#include "engine/op_dispatch.h"

namespace keras::distribution {

bool ShardingAnnotation::equals(const TensorAnnotation& other) const {
  const auto* sharded = dynamic_cast<const ShardingAnnotation*>(&other);
  return sharded != nullptr && sharded->sharding_ == sharding_;
}

std::optional<Sharding> sharding_of(const Tensor& tensor) {
  const auto* annotation = dynamic_cast<const ShardingAnnotation*>(tensor.annotation().get());
  if (annotation == nullptr) return std::nullopt;
  return annotation->sharding();
}

Tensor with_sharding(Tensor tensor, const Sharding& sharding) {
  if (tensor.local_shape() != sharding.local_shape()) {
    throw ShapeError(str("a local tensor of shape ", shape_to_string(tensor.local_shape()),
                         " cannot be the block of ", sharding.to_string(), ", whose blocks have shape ",
                         shape_to_string(sharding.local_shape())));
  }
  Shape logical = sharding.global_shape();
  const bool variable = !tensor.impl()->name.empty();
  if (const ShardingContext* step = StepContext::sharding(); step != nullptr && !variable && !logical.empty()) {
    const Placement& batch = static_cast<std::size_t>(step->batch_axis) < sharding.placements().size()
                                 ? sharding.placement(step->batch_axis)
                                 : Placement::replicate();
    if (batch.is_shard() && batch.dim() == 0) logical[0] = tensor.local_shape()[0];
  }
  tensor.set_annotation(std::make_shared<ShardingAnnotation>(sharding, std::move(logical)));
  return tensor;
}

Sharding variable_sharding(const Tensor& variable, const DeviceMeshPtr& mesh) {
  if (std::optional<Sharding> sharding = sharding_of(variable)) return *sharding;
  return Sharding::replicated(mesh, variable.shape());
}

std::optional<ShardingContext> ShardingContext::current() {
  std::shared_ptr<Distribution> active = distribution();
  if (!active || num_processes() == 1) return std::nullopt;
  const DeviceMeshPtr& mesh = active->device_mesh();
  if (mesh->size() != num_processes()) return std::nullopt;
  ShardingContext context;
  context.mesh = mesh;
  context.batch_axis = mesh->axis_index(active->batch_dim_name());
  context.coordinates = process_coordinates(*mesh);
  context.active = std::move(active);
  // Every axis group of the mesh, created in axis order the first time (a collective split
  // on every process), then served from the cache: layers that reach for their groups in
  // different orders can then never split in different orders.
  for (int axis = 0; axis < context.axes(); ++axis) context.group(axis);
  return context;
}

Sharding ShardingContext::data_sharding(const Shape& local_shape) const {
  std::vector<Placement> placements(static_cast<std::size_t>(axes()), Placement::replicate());
  Shape global = local_shape;
  if (!global.empty()) {
    placements[static_cast<std::size_t>(batch_axis)] = Placement::shard(0);
    global[0] *= batch_axis_size();
  }
  return Sharding(mesh, std::move(placements), std::move(global));
}

Sharding ShardingContext::activation_sharding(const Tensor& local) const {
  if (std::optional<Sharding> sharding = sharding_of(local)) return *sharding;
  return data_sharding(local.shape());
}

Shape ShardingContext::logical_shape(const Tensor& local) const {
  Shape shape = activation_sharding(local).global_shape();
  if (!shape.empty()) shape[0] = local.dim(0);
  return shape;
}

Sharding ShardingContext::activation_target(const TensorLayout& layout, const Sharding& current,
                                            const std::string& what) const {
  const Shape& global = current.global_shape();
  if (layout.axes().size() != global.size()) {
    throw ValueError(str(what, ": the layout ", layout.to_string(), " has ", layout.axes().size(),
                         " entries but the tensor has rank ", global.size(), " (shape ",
                         shape_to_string(global), "); a layout needs one entry per dimension"));
  }
  if (layout.device_mesh() && layout.device_mesh()->shape() != mesh->shape()) {
    throw ValueError(str(what, ": the layout's mesh ", layout.device_mesh()->to_string(),
                         " is not the distribution's mesh ", mesh->to_string()));
  }
  std::vector<Placement> placements(static_cast<std::size_t>(axes()), Placement::replicate());
  const std::string& batch_name = axis_name(batch_axis);
  for (std::size_t dim = 0; dim < layout.axes().size(); ++dim) {
    const auto& axis = layout.axes()[dim];
    if (!axis) continue;
    int index = mesh->axis_index(*axis);  // ValueError for an unknown axis
    if (dim == 0 && index != batch_axis) {
      throw ValueError(str(what, ": the layout ", layout.to_string(), " splits dimension 0 over '",
                           *axis, "', but dimension 0 of an activation is the batch, split over "
                           "the batch axis '", batch_name, "' only"));
    }
    if (dim != 0 && index == batch_axis) {
      throw ValueError(str(what, ": the layout ", layout.to_string(), " splits dimension ", dim,
                           " over the batch axis '", batch_name, "', which splits the batch "
                           "(dimension 0)"));
    }
    if (dim != 0) placements[static_cast<std::size_t>(index)] = Placement::shard(static_cast<int>(dim));
  }
  if (!global.empty()) placements[static_cast<std::size_t>(batch_axis)] = Placement::shard(0);
  return Sharding(mesh, std::move(placements), global);
}

Tensor ShardingContext::relayout(const Tensor& local, const Sharding& from,
                                 const Sharding& target) const {
  ShardedOpScope local_blocks(nullptr);  // moves stored blocks (Tensor::shape())
  if (from == target) return with_sharding(local, target);
  // Activations: the gradient arriving at a gathered activation is the replicated one (the
  // layers keep that convention), so no axis needs a reduce-scatter here.
  return with_sharding(redistribute(local, from, target), target);
}

Tensor ShardingContext::to_data_layout(const Tensor& local) const {
  ShardedOpScope local_blocks(nullptr);  // moves stored blocks (Tensor::shape())
  std::optional<Sharding> sharding = sharding_of(local);
  if (!sharding) return local;
  Sharding target(mesh, data_sharding(local.shape()).placements(), sharding->global_shape());
  Tensor moved = redistribute(local, *sharding, target);
  // Unannotated means "the data layout". The tensor handed in keeps its annotation: it may
  // feed other layers too.
  if (!moved.same_as(local)) moved.set_annotation(nullptr);
  return moved;
}

Tensor ShardingContext::operand(const Tensor& local, const Sharding& from, const Sharding& target,
                                const Sharding& output) const {
  std::vector<bool> output_split;
  for (int axis = 0; axis < axes(); ++axis) output_split.push_back(!output.placement(axis).is_replicate());
  return operand(local, from, target, output_split);
}

Tensor ShardingContext::operand(const Tensor& local, const Sharding& from, const Sharding& target,
                                const std::vector<bool>& output_split) const {
  ShardedOpScope local_blocks(nullptr);  // moves stored blocks (Tensor::shape())
  std::vector<ArrivingGradient> arriving(static_cast<std::size_t>(axes()), ArrivingGradient::replicated);
  for (int axis = 0; axis < axes(); ++axis) {
    if (output_split[static_cast<std::size_t>(axis)]) arriving[static_cast<std::size_t>(axis)] = ArrivingGradient::partial;
  }
  Tensor moved = from == target ? local : redistribute(local, from, target, arriving);
  for (int axis = 0; axis < axes(); ++axis) {
    if (axis == batch_axis || !output_split[static_cast<std::size_t>(axis)]) continue;
    if (from.placement(axis).is_replicate() && target.placement(axis).is_replicate()) {
      moved = identity_with_summed_grad(moved, group(axis));
    }
  }
  return moved;
}

}  // namespace keras::distribution
