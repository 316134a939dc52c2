// How one tensor lies over a device mesh, in the one internal form the engine reasons with
// (PyTorch DTensor's): for each mesh axis a placement, Replicate (every process along the axis
// holds the same values), Shard(dim) (the processes along the axis hold consecutive equal
// blocks of tensor dimension `dim`) or Partial (each holds a summand; the tensor is their
// sum), plus the global shape. Keras' TensorLayout, indexed by tensor dimension with None for
// "whole", converts to it at the API edge (from_layout). Partial exists only inside a step (a
// matmul whose contracted dimension is sharded produces one) and never reaches the user.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "distribution/api/device_mesh.h"

namespace keras::distribution {

class Placement {
 public:
  enum class Kind { replicate, shard, partial };
  static Placement replicate() { return Placement(Kind::replicate, -1); }
  static Placement shard(int dim) { return Placement(Kind::shard, dim); }
  static Placement partial() { return Placement(Kind::partial, -1); }

  Kind kind() const { return kind_; }
  bool is_replicate() const { return kind_ == Kind::replicate; }
  bool is_shard() const { return kind_ == Kind::shard; }
  bool is_partial() const { return kind_ == Kind::partial; }
  int dim() const { return dim_; }  // the sharded tensor dimension; -1 unless is_shard()
  bool operator==(const Placement& other) const = default;
  std::string to_string() const;  // "R", "S(1)", "P(sum)"

 private:
  Placement(Kind kind, int dim) : kind_(kind), dim_(dim) {}
  Kind kind_;
  int dim_;
};

class Sharding {
 public:
  // Checks that there is one placement per mesh axis, that shard dims are in range, that no
  // tensor dimension is sharded by two mesh axes, and that every sharded dimension divides.
  Sharding(DeviceMeshPtr mesh, std::vector<Placement> placements, Shape global_shape);
  static Sharding replicated(DeviceMeshPtr mesh, Shape global_shape);
  // Keras' layout (one mesh axis or None per tensor dimension) for a tensor of `global_shape`;
  // `what` names the tensor in errors (rank, unknown axis, divisibility).
  static Sharding from_layout(const TensorLayout& layout, const Shape& global_shape,
                              const std::string& what);

  const DeviceMeshPtr& mesh() const { return mesh_; }
  const std::vector<Placement>& placements() const { return placements_; }
  const Placement& placement(int mesh_axis) const { return placements_.at(static_cast<std::size_t>(mesh_axis)); }
  const Shape& global_shape() const { return global_shape_; }
  // The same tensor with mesh axis `mesh_axis` placed as `placement`.
  Sharding with(int mesh_axis, Placement placement) const;
  // The mesh axis that shards tensor dimension `dim`, or -1 when none does.
  int axis_sharding(int dim) const;

  // The block of the global tensor that the device at mesh `coordinates` holds: (starts, sizes).
  // For Partial axes the block is the whole extent (a summand of the full tensor).
  std::pair<Shape, Shape> block(const std::vector<std::int64_t>& coordinates) const;
  Shape local_shape() const;  // the same for every device: blocks are equal
  bool is_replicated() const;
  bool has_partial() const;
  bool operator==(const Sharding& other) const;
  // "[S(1), R] of (784, 1024) on mesh (1, 2) ('batch', 'model')"
  std::string to_string() const;

 private:
  DeviceMeshPtr mesh_;
  std::vector<Placement> placements_;
  Shape global_shape_;
};

}  // namespace keras::distribution
