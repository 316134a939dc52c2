// Collectives as autograd ops and the redistribution planner (see redistribute.h).
#include "distribution/sharding/redistribute.h"

#include "distribution/runtime/collective_log.h"
#include "distribution/api/distribution.h"
#include "engine/op_dispatch.h"
#include "engine/ops.h"

namespace keras::distribution {
namespace {

using GroupPointer = std::shared_ptr<Communicator>;

void check_dim(const Tensor& x, int dim, const char* what) {
  if (!x.defined()) throw ValueError(str(what, ": the tensor is undefined"));
  if (dim < 0 || dim >= x.rank()) {
    throw ValueError(str(what, ": dimension ", dim, " is out of range for a tensor of shape ",
                         shape_to_string(x.shape())));
  }
}

// Moves dimension `from` to position `to`, keeping the order of the others.
std::vector<std::int64_t> move_dimension(int rank, int from, int to) {
  std::vector<std::int64_t> order;
  for (int d = 0; d < rank; ++d) {
    if (d != from) order.push_back(d);
  }
  order.insert(order.begin() + to, from);
  return order;
}

// The plain computations, without gradient recording.
Tensor gather_along(const Tensor& x, Communicator& group, int dim) {
  NoGradGuard no_grad;
  CollectiveLog::record("all_gather", group.name(), static_cast<std::int64_t>(x.nbytes()) * group.size());
  Tensor gathered = group.all_gather(x);  // (n, s0, ..., s_k-1)
  Tensor moved = ops::transpose(gathered, move_dimension(x.rank() + 1, 0, dim));
  Shape shape = x.shape();
  shape[static_cast<std::size_t>(dim)] *= group.size();
  return ops::reshape(moved, shape);
}

Tensor sum_scatter_along(const Tensor& x, Communicator& group, int dim) {
  NoGradGuard no_grad;
  if (x.dim(dim) % group.size() != 0) {
    throw ShapeError(str("reduce_scatter over ", group.name(), ": dimension ", dim, " of shape ",
                         shape_to_string(x.shape()), " cannot be split evenly over ", group.size(),
                         " processes"));
  }
  Tensor front = dim == 0 ? x : ops::transpose(x, move_dimension(x.rank(), dim, 0));
  CollectiveLog::record("reduce_scatter", group.name(), static_cast<std::int64_t>(x.nbytes()));
  Tensor block = group.reduce_scatter(front, ReduceOperation::sum);
  return dim == 0 ? block : ops::transpose(block, move_dimension(x.rank(), 0, dim));
}

Tensor chunk_along(const Tensor& x, const Communicator& group, int dim) {
  NoGradGuard no_grad;
  if (x.dim(dim) % group.size() != 0) {
    throw ShapeError(str("local_chunk over ", group.name(), ": dimension ", dim, " of shape ",
                         shape_to_string(x.shape()), " cannot be split evenly over ", group.size(),
                         " processes"));
  }
  Shape starts(static_cast<std::size_t>(x.rank()), 0), sizes = x.shape();
  sizes[static_cast<std::size_t>(dim)] /= group.size();
  starts[static_cast<std::size_t>(dim)] = sizes[static_cast<std::size_t>(dim)] * group.rank();
  return ops::slice(x, starts, sizes);
}

Tensor sum_all(const Tensor& x, Communicator& group) {
  NoGradGuard no_grad;
  CollectiveLog::record("all_reduce", group.name(), static_cast<std::int64_t>(x.nbytes()));
  Tensor out = x.clone();
  group.all_reduce(out, ReduceOperation::sum);
  return out;
}

}  // namespace

Tensor all_reduce_sum(const Tensor& partial, const GroupPointer& group) {
  if (!partial.defined()) throw ValueError("all_reduce_sum: the tensor is undefined");
  Tensor out = sum_all(partial, *group);
  return record_gradient(out, "all_reduce_sum", {partial},
                         [](const Tensor& gradient) { return std::vector<Tensor>{gradient}; });
}

Tensor identity_with_summed_grad(const Tensor& replicated, const GroupPointer& group) {
  if (!replicated.defined()) throw ValueError("identity_with_summed_grad: the tensor is undefined");
  // A new tensor handle on the same data: the gradient node belongs to it, not to the input.
  Tensor out = Tensor::view_of(replicated, 0, replicated.shape());
  return record_gradient(out, "identity_with_summed_grad", {replicated}, [group](const Tensor& gradient) {
    return std::vector<Tensor>{sum_all(gradient, *group)};
  });
}

Tensor all_gather(const Tensor& shard, const GroupPointer& group, int dim,
                  ArrivingGradient arriving) {
  check_dim(shard, dim, "all_gather");
  Tensor out = gather_along(shard, *group, dim);
  return record_gradient(out, "all_gather", {shard}, [group, dim, arriving](const Tensor& gradient) {
    return std::vector<Tensor>{arriving == ArrivingGradient::replicated
                                   ? chunk_along(gradient, *group, dim)
                                   : sum_scatter_along(gradient, *group, dim)};
  });
}

Tensor reduce_scatter(const Tensor& partial, const GroupPointer& group, int dim) {
  check_dim(partial, dim, "reduce_scatter");
  Tensor out = sum_scatter_along(partial, *group, dim);
  return record_gradient(out, "reduce_scatter", {partial}, [group, dim](const Tensor& gradient) {
    return std::vector<Tensor>{gather_along(gradient, *group, dim)};
  });
}

Tensor local_chunk(const Tensor& replicated, const GroupPointer& group, int dim) {
  check_dim(replicated, dim, "local_chunk");
  Tensor out = chunk_along(replicated, *group, dim);
  return record_gradient(out, "local_chunk", {replicated}, [group, dim](const Tensor& gradient) {
    return std::vector<Tensor>{gather_along(gradient, *group, dim)};
  });
}

Tensor all_to_all(const Tensor& shard, const GroupPointer& group, int from_dim, int to_dim) {
  check_dim(shard, from_dim, "all_to_all");
  check_dim(shard, to_dim, "all_to_all");
  if (from_dim == to_dim) return shard;
  return local_chunk(all_gather(shard, group, from_dim), group, to_dim);
}

Tensor redistribute(const Tensor& local, const Sharding& from, const Sharding& to,
                    const std::vector<ArrivingGradient>& arriving) {
  ShardedOpScope local_blocks(nullptr);  // moves stored blocks (Tensor::shape())
  if (from.global_shape() != to.global_shape()) {
    throw ShapeError(str("redistribute: from ", from.to_string(), " to ", to.to_string(),
                         ": the global shapes differ"));
  }
  const DeviceMesh& mesh = *from.mesh();
  const DeviceMesh& target_mesh = *to.mesh();
  if (&mesh != &target_mesh &&
      (mesh.shape() != target_mesh.shape() || mesh.axis_names() != target_mesh.axis_names() ||
       mesh.devices() != target_mesh.devices())) {
    throw ValueError(str("redistribute: from ", from.to_string(), " to ", to.to_string(),
                         ": the meshes differ; moving between meshes is not supported"));
  }
  if (to.has_partial()) {
    throw ValueError(str("redistribute: the target ", to.to_string(), " has a Partial axis; ",
                         "Partial is a matmul's output, never a target"));
  }
  if (local.shape() != from.local_shape()) {
    throw ShapeError(str("redistribute: the local tensor has shape ", shape_to_string(local.shape()),
                         " but ", from.to_string(), " gives each process a block of shape ",
                         shape_to_string(from.local_shape())));
  }
  const int axes = static_cast<int>(mesh.shape().size());
  if (!arriving.empty() && static_cast<int>(arriving.size()) != axes) {
    throw ValueError(str("redistribute: ", arriving.size(), " arriving-gradient kinds for a mesh of ",
                         axes, " axes; expected one per axis (or none)"));
  }
  auto group_of = [&](int axis) { return mesh_axis_group(mesh, mesh.axis_names()[static_cast<std::size_t>(axis)]); };
  Tensor current = local;
  Sharding state = from;
  // 1. Partial axes: reduce to the target (replicated, or straight into its shard).
  for (int axis = 0; axis < axes; ++axis) {
    const Placement& source = state.placement(axis);
    const Placement& target = to.placement(axis);
    if (!source.is_partial()) continue;
    const int holder = target.is_shard() ? state.axis_sharding(target.dim()) : -1;
    if (target.is_shard() && (holder < 0 || holder == axis)) {
      current = reduce_scatter(current, group_of(axis), target.dim());
      state = state.with(axis, target);
      continue;
    }
    current = all_reduce_sum(current, group_of(axis));
    state = state.with(axis, Placement::replicate());
  }
  // 2. Shards that change: gather them whole. A shard moving to another dimension is cut again
  // in step 3, which together is what all_to_all does today.
  for (int axis = 0; axis < axes; ++axis) {
    const Placement& source = state.placement(axis);
    const Placement& target = to.placement(axis);
    if (!source.is_shard() || source == target) continue;
    current = all_gather(current, group_of(axis), source.dim(),
                         arriving.empty() ? ArrivingGradient::replicated
                                          : arriving[static_cast<std::size_t>(axis)]);
    state = state.with(axis, Placement::replicate());
  }
  // 3. Replicated axes that the target shards: cut this process's block.
  for (int axis = 0; axis < axes; ++axis) {
    const Placement& target = to.placement(axis);
    if (!state.placement(axis).is_replicate() || !target.is_shard()) continue;
    current = local_chunk(current, group_of(axis), target.dim());
    state = state.with(axis, target);
  }
  return current;
}

}  // namespace keras::distribution
