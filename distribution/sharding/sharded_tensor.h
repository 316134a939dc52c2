// How the layers learn, under a distribution, where a local tensor sits in the global one. A
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

#include "distribution/api/distribution.h"
#include "distribution/sharding/placement.h"
#include "distribution/sharding/redistribute.h"

namespace keras::distribution {

class ShardingAnnotation : public TensorAnnotation {
 public:
  // `logical_shape`: what Tensor::shape() reads inside a layer's call (see with_sharding).
  ShardingAnnotation(Sharding sharding, Shape logical_shape)
      : sharding_(std::move(sharding)), logical_shape_(std::move(logical_shape)) {}
  const Sharding& sharding() const { return sharding_; }
  bool equals(const TensorAnnotation& other) const override;
  std::string to_string() const override { return sharding_.to_string(); }
  const Shape& logical_shape() const override { return logical_shape_; }

 private:
  Sharding sharding_;
  Shape logical_shape_;
};

// The sharding recorded on `tensor`, if any.
std::optional<Sharding> sharding_of(const Tensor& tensor);
// Records `sharding` on `tensor` (checking that the tensor's stored shape is its local block)
// and returns the tensor. Its logical shape (Tensor::shape() inside a layer's call) is the
// global shape, except that an activation split over the step's batch axis keeps the rows this
// process holds: the batch is each process's own, as under DataParallel, where activations
// carry no annotation at all.
Tensor with_sharding(Tensor tensor, const Sharding& sharding);

// What the layers need to know about the active distribution: engaged when one is set, there
// are several processes, and its mesh has one device per process. Under DataParallel the
// mesh is the batch axis alone, so every rule keeps activations split there and variables
// whole, and the layers communicate nothing (the trainer sums the gradients).
struct ShardingContext {
  DeviceMeshPtr mesh;
  int batch_axis = 0;                     // index of the batch axis in the mesh
  std::vector<std::int64_t> coordinates;  // this process's mesh coordinates
  std::shared_ptr<Distribution> active;

  // Resolved from the global distribution. Only the step context calls it (step_context.h):
  // everything else reads StepContext::sharding().
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

  // Moves an operand (laid out as `from`) to `target`, the sharding a rule asked of it, for an
  // operation whose output lies as `output`. On a mesh axis where the output is not
  // replicated, the processes compute different parts, so the gradient arriving at the
  // operand is a summand on each: a gather there reduce-scatters its gradient, and an operand
  // replicated there passes through identity_with_summed_grad (Megatron's f), except on the
  // batch axis, whose variable gradients the trainer sums.
  Tensor operand(const Tensor& local, const Sharding& from, const Sharding& target,
                 const Sharding& output) const;
  // The same, given for each mesh axis whether the output is split (not replicated) there.
  Tensor operand(const Tensor& local, const Sharding& from, const Sharding& target,
                 const std::vector<bool>& output_split) const;
};

// The sharding of a variable tensor (its annotation), or replicated on `mesh` if it has none.
Sharding variable_sharding(const Tensor& variable, const DeviceMeshPtr& mesh);

}  // namespace keras::distribution
