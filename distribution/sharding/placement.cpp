// Placements and shardings (see placement.h).
#include "distribution/sharding/placement.h"

namespace keras::distribution {

std::string Placement::to_string() const {
  switch (kind_) {
    case Kind::replicate: return "R";
    case Kind::shard: return str("S(", dim_, ")");
    case Kind::partial: return "P(sum)";
  }
  return "?";
}

Sharding::Sharding(DeviceMeshPtr mesh, std::vector<Placement> placements, Shape global_shape)
    : mesh_(std::move(mesh)), placements_(std::move(placements)),
      global_shape_(std::move(global_shape)) {
  if (!mesh_) throw ValueError("Sharding: a sharding needs a device mesh; got none");
  check_valid_shape(global_shape_, "Sharding");
  if (placements_.size() != mesh_->shape().size()) {
    throw ValueError(str("Sharding: ", placements_.size(), " placements for ", mesh_->to_string(),
                         ", which has ", mesh_->shape().size(), " axes; expected one per mesh axis"));
  }
  std::vector<int> sharded_by(global_shape_.size(), -1);
  for (std::size_t axis = 0; axis < placements_.size(); ++axis) {
    const Placement& placement = placements_[axis];
    if (!placement.is_shard()) continue;
    int dim = placement.dim();
    if (dim < 0 || dim >= static_cast<int>(global_shape_.size())) {
      throw ValueError(str("Sharding: mesh axis '", mesh_->axis_names()[axis], "' shards dimension ",
                           dim, " of a tensor of shape ", shape_to_string(global_shape_),
                           "; expected a dimension in [0, ", global_shape_.size(), ")"));
    }
    if (sharded_by[static_cast<std::size_t>(dim)] >= 0) {
      throw NotImplementedError(
          str("Sharding: dimension ", dim, " of shape ", shape_to_string(global_shape_),
              " is sharded by two mesh axes ('",
              mesh_->axis_names()[static_cast<std::size_t>(sharded_by[static_cast<std::size_t>(dim)])],
              "' and '", mesh_->axis_names()[axis], "'); one mesh axis per dimension is supported"));
    }
    sharded_by[static_cast<std::size_t>(dim)] = static_cast<int>(axis);
    std::int64_t parts = mesh_->shape()[axis];
    if (global_shape_[static_cast<std::size_t>(dim)] % parts != 0) {
      throw ValueError(str("Sharding: dimension ", dim, " of shape ", shape_to_string(global_shape_),
                           " (size ", global_shape_[static_cast<std::size_t>(dim)],
                           ") cannot be split evenly over mesh axis '", mesh_->axis_names()[axis],
                           "' of size ", parts));
    }
  }
}

int Sharding::axis_sharding(int dim) const {
  for (std::size_t axis = 0; axis < placements_.size(); ++axis) {
    if (placements_[axis].is_shard() && placements_[axis].dim() == dim) return static_cast<int>(axis);
  }
  return -1;
}

Sharding Sharding::replicated(DeviceMeshPtr mesh, Shape global_shape) {
  std::size_t axes = mesh ? mesh->shape().size() : 0;
  return Sharding(std::move(mesh), std::vector<Placement>(axes, Placement::replicate()),
                  std::move(global_shape));
}

Sharding Sharding::from_layout(const TensorLayout& layout, const Shape& global_shape,
                               const std::string& what) {
  layout.check_fits(global_shape, what);
  const DeviceMeshPtr& mesh = layout.device_mesh();
  std::vector<Placement> placements(mesh->shape().size(), Placement::replicate());
  for (std::size_t dim = 0; dim < layout.axes().size(); ++dim) {
    if (!layout.axes()[dim]) continue;
    placements[static_cast<std::size_t>(mesh->axis_index(*layout.axes()[dim]))] =
        Placement::shard(static_cast<int>(dim));
  }
  return Sharding(mesh, std::move(placements), global_shape);
}

Sharding Sharding::with(int mesh_axis, Placement placement) const {
  std::vector<Placement> placements = placements_;
  placements.at(static_cast<std::size_t>(mesh_axis)) = placement;
  return Sharding(mesh_, std::move(placements), global_shape_);
}

std::pair<Shape, Shape> Sharding::block(const std::vector<std::int64_t>& coordinates) const {
  if (coordinates.size() != placements_.size()) {
    throw ValueError(str("Sharding::block: ", coordinates.size(), " coordinates for a mesh of ",
                         placements_.size(), " axes"));
  }
  Shape starts(global_shape_.size(), 0), sizes = global_shape_;
  for (std::size_t axis = 0; axis < placements_.size(); ++axis) {
    if (!placements_[axis].is_shard()) continue;
    auto dim = static_cast<std::size_t>(placements_[axis].dim());
    sizes[dim] = global_shape_[dim] / mesh_->shape()[axis];
    starts[dim] = coordinates[axis] * sizes[dim];
  }
  return {starts, sizes};
}

Shape Sharding::local_shape() const {
  return block(std::vector<std::int64_t>(placements_.size(), 0)).second;
}

bool Sharding::is_replicated() const {
  for (const Placement& placement : placements_) {
    if (!placement.is_replicate()) return false;
  }
  return true;
}

bool Sharding::has_partial() const {
  for (const Placement& placement : placements_) {
    if (placement.is_partial()) return true;
  }
  return false;
}

bool Sharding::operator==(const Sharding& other) const {
  return placements_ == other.placements_ && global_shape_ == other.global_shape_ &&
         (mesh_ == other.mesh_ || (mesh_->shape() == other.mesh_->shape() &&
                                   mesh_->axis_names() == other.mesh_->axis_names() &&
                                   mesh_->devices() == other.mesh_->devices()));
}

std::string Sharding::to_string() const {
  std::string text = "[";
  for (std::size_t axis = 0; axis < placements_.size(); ++axis) {
    text += (axis ? ", " : "") + placements_[axis].to_string();
  }
  text += str("] of ", shape_to_string(global_shape_), " on mesh ", shape_to_string(mesh_->shape()), " (");
  for (std::size_t axis = 0; axis < mesh_->axis_names().size(); ++axis) {
    text += (axis ? ", '" : "'") + mesh_->axis_names()[axis] + "'";
  }
  return text + ")";
}

}  // namespace keras::distribution
