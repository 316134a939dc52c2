// The sharded contraction rule (see the header's table).
#include "distribution/sharded_matmul.h"

#include "engine/ops.h"

namespace keras::distribution {

ShardedTensor sharded_matmul(const ShardingContext& context, const Tensor& x,
                             const Sharding& x_sharding, const Tensor& kernel,
                             const Sharding& kernel_sharding) {
  const int rank = static_cast<int>(x_sharding.global_shape().size());
  if (rank < 2 || kernel_sharding.global_shape().size() != 2) {
    throw ShapeError(str("sharded_matmul: needs an activation of rank >= 2 (batch first) and a ",
                         "rank-2 kernel; got ", x_sharding.to_string(), " and ",
                         kernel_sharding.to_string()));
  }
  if (x_sharding.has_partial() || kernel_sharding.has_partial()) {
    throw ValueError("sharded_matmul: inputs must not be partial; resolve them first");
  }
  const int contracted = rank - 1;
  const int axes = context.axes();
  Shape out_global = x_sharding.global_shape();
  out_global.back() = kernel_sharding.global_shape()[1];

  Tensor x_local = x, kernel_local = kernel;
  Sharding x_state = x_sharding, kernel_state = kernel_sharding;
  std::vector<Placement> out(static_cast<std::size_t>(axes), Placement::replicate());
  std::vector<int> chunk_x_on, summed_x_on, summed_kernel_on;
  // 1. Gathers (on every axis first, so that the chunks of step 2 cut whole dimensions).
  for (int axis = 0; axis < axes; ++axis) {
    const Placement px = x_sharding.placement(axis), pk = kernel_sharding.placement(axis);
    const bool x_contracted = px.is_shard() && px.dim() == contracted;
    const bool x_other = px.is_shard() && !x_contracted;
    auto group = [&] { return context.group(axis); };
    if (pk.is_replicate()) {
      if (x_contracted) {  // the kernel is whole here: bring the whole of x's contracted dim
        x_local = all_gather(x_local, group(), contracted, ArrivingGradient::replicated);
        x_state = x_state.with(axis, Placement::replicate());
      } else if (x_other) {
        out[static_cast<std::size_t>(axis)] = px;
        if (axis != context.batch_axis) summed_kernel_on.push_back(axis);
      }
    } else if (pk.dim() == 1) {  // column block
      out[static_cast<std::size_t>(axis)] = Placement::shard(rank - 1);
      if (x_contracted) {
        x_local = all_gather(x_local, group(), contracted, ArrivingGradient::partial);
        x_state = x_state.with(axis, Placement::replicate());
      } else if (x_other) {
        kernel_local = all_gather(kernel_local, group(), 1, ArrivingGradient::partial);
        kernel_state = kernel_state.with(axis, Placement::replicate());
        out[static_cast<std::size_t>(axis)] = px;
      } else {
        summed_x_on.push_back(axis);
      }
    } else {  // row block
      out[static_cast<std::size_t>(axis)] = Placement::partial();
      if (x_other) {
        kernel_local = all_gather(kernel_local, group(), 0, ArrivingGradient::partial);
        kernel_state = kernel_state.with(axis, Placement::replicate());
        out[static_cast<std::size_t>(axis)] = px;
      } else if (!x_contracted) {
        chunk_x_on.push_back(axis);
      }
    }
  }
  // 2. A replicated x against a row block: this process's columns of x.
  for (int axis : chunk_x_on) {
    x_local = local_chunk(x_local, context.group(axis), contracted);
    x_state = x_state.with(axis, Placement::shard(contracted));
  }
  // 3. Megatron's f, next to the product whose per-process gradient it sums.
  for (int axis : summed_x_on) x_local = identity_with_summed_grad(x_local, context.group(axis));
  for (int axis : summed_kernel_on) {
    kernel_local = identity_with_summed_grad(kernel_local, context.group(axis));
  }
  Tensor product = ops::matmul(x_local, kernel_local);
  Sharding out_sharding(context.mesh, std::move(out), std::move(out_global));
  product.set_annotation(nullptr);
  if (product.shape() != out_sharding.local_shape()) {
    throw ShapeError(str("sharded_matmul: internal error: the local product has shape ",
                         shape_to_string(product.shape()), " but ", out_sharding.to_string(),
                         " expects ", shape_to_string(out_sharding.local_shape())));
  }
  return {product, out_sharding};
}

ShardedTensor resolve_partial(const ShardingContext& context, ShardedTensor value,
                              const Sharding* preferred) {
  if (!value.sharding.has_partial()) return value;
  Sharding target = value.sharding;
  for (int axis = 0; axis < context.axes(); ++axis) {
    if (!target.placement(axis).is_partial()) continue;
    Placement wanted = Placement::replicate();
    if (preferred != nullptr && preferred->placement(axis).is_shard()) {
      int dim = preferred->placement(axis).dim();
      bool free = true;
      for (int other = 0; other < context.axes(); ++other) {
        const Placement& placement = target.placement(other);
        free = free && !(other != axis && placement.is_shard() && placement.dim() == dim);
      }
      if (free) wanted = preferred->placement(axis);
    }
    target = target.with(axis, wanted);
  }
  return {redistribute(value.local, value.sharding, target), target};
}

}  // namespace keras::distribution
