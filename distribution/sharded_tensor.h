// How the layers learn, under ModelParallel, where a local tensor sits in the global one. A
// tensor's Sharding rides on it as an engine annotation (TensorAnnotation), set by the layers
// and kept by element-wise ops; a tensor without one is laid out like the data: dimension 0
// split over the batch axis, every other mesh axis replicated.
//
// Activations' dimension 0 is the batch. The trainer splits each global batch over the batch
// axis (the last batch of a dataset possibly unevenly), so an activation's Sharding records a
// batch extent of (local rows x batch-axis size): consistent within every group of processes
// that share a batch shard, which is every group a layer communicates in. No collective ever
// runs over the batch axis on an activation: the batch placement is the same before and after
// every layer, and gradients over it are the trainer's business.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "distribution/distribution.h"
#include "distribution/placement.h"
#include "distribution/redistribute.h"

namespace keras::distribution {

class ShardingAnnotation : public TensorAnnotation {
 public:
  explicit ShardingAnnotation(Sharding sharding) : sharding_(std::move(sharding)) {}
  const Sharding& sharding() const { return sharding_; }
  bool equals(const TensorAnnotation& other) const override;
  std::string to_string() const override { return sharding_.to_string(); }

 private:
  Sharding sharding_;
};

// The sharding recorded on `tensor`, if any.
std::optional<Sharding> sharding_of(const Tensor& tensor);
// Records `sharding` on `tensor` (checking that the tensor's shape is its local block) and
// returns the tensor.
Tensor with_sharding(Tensor tensor, const Sharding& sharding);

// What the layers need to know about the active ModelParallel run: engaged when a
// ModelParallel (or any non-DataParallel distribution) is set, there are several processes,
// and its mesh has one device per process. DataParallel never engages it: its layers are the
// one-process layers and the trainer does all the communication.
struct ShardingContext {
  DeviceMeshPtr mesh;
  int batch_axis = 0;                     // index of the batch axis in the mesh
  std::vector<std::int64_t> coordinates;  // this process's mesh coordinates
  std::shared_ptr<Distribution> active;

  static std::optional<ShardingContext> current();
  std::int64_t batch_axis_size() const { return mesh->shape()[static_cast<std::size_t>(batch_axis)]; }
  const std::string& axis_name(int axis) const { return mesh->axis_names()[static_cast<std::size_t>(axis)]; }
  int axes() const { return static_cast<int>(mesh->shape().size()); }
  std::shared_ptr<Communicator> group(int axis) const { return mesh_axis_group(*mesh, axis_name(axis)); }

  // An unannotated activation's sharding: the data layout.
  Sharding data_sharding(const Shape& local_shape) const;
  // The tensor's own sharding, or the data layout when it has none.
  Sharding activation_sharding(const Tensor& local) const;
  // The shape a layer builds from: global in every dimension but the batch (kept local).
  Shape logical_shape(const Tensor& local) const;
  // An activation layout from the LayoutMap ("<layer path>/output") as a sharding of an
  // activation currently laid out as `current`. Dimension 0 stays split over the batch axis;
  // a layout that names the batch axis elsewhere, or another axis on dimension 0, is a
  // ValueError, as is a rank that differs from the activation's.
  Sharding activation_target(const TensorLayout& layout, const Sharding& current,
                             const std::string& what) const;
  // Moves an activation to `target` and annotates the result.
  Tensor relayout(const Tensor& local, const Sharding& from, const Sharding& target) const;
  // Moves an activation to the data layout (for layers that cannot take sharded inputs, and
  // for the loss).
  Tensor to_data_layout(const Tensor& local) const;

  // Brings a variable (laid out as `from`) to `target` for use beside an activation laid out
  // as `consumer`, of which variable dimension v lines up with activation dimension
  // aligned[v]. Where the activation differs between the processes of a mesh axis (it is
  // sharded there along a dimension no variable dimension lines up with) the gradient the
  // variable receives there is partial: gathers on such axes reduce-scatter their gradient,
  // and on such axes other than the batch axis (the trainer reduces that one) a variable that
  // stays replicated passes through identity_with_summed_grad.
  Tensor variable_as(const Tensor& variable, const Sharding& from, const Sharding& target,
                     const Sharding& consumer, const std::vector<int>& aligned) const;
  // The mesh axes over which `consumer` differs between processes, given the activation
  // dimensions that line up with the variable's.
  std::vector<bool> data_differs(const Sharding& consumer, const std::vector<int>& aligned) const;
};

// The sharding of a variable tensor (its annotation), or replicated on `mesh` if it has none.
Sharding variable_sharding(const Tensor& variable, const DeviceMeshPtr& mesh);

}  // namespace keras::distribution
