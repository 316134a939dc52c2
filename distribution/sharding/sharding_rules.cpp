// The sharding rules (see the header): decisions on Shardings only, no data moves here.
#include "distribution/sharding/sharding_rules.h"

#include <algorithm>

#include "engine/errors.h"

namespace keras::distribution::sharding_rules {
namespace {

int position(const std::string& labels, char label) {
  std::size_t found = labels.find(label);
  return found == std::string::npos ? -1 : static_cast<int>(found);
}

void check_not_partial(const Sharding& value, const char* rule) {
  if (value.has_partial()) {
    throw ValueError(str("sharding rule '", rule, "': the input ", value.to_string(),
                         " is partial; sum it first (sharding_rules::resolved)"));
  }
}

void check_same_mesh(const Sharding& a, const Sharding& b, const char* rule) {
  if (a.mesh() != b.mesh() && (a.mesh()->shape() != b.mesh()->shape() ||
                               a.mesh()->axis_names() != b.mesh()->axis_names())) {
    throw ValueError(str("sharding rule '", rule, "': the inputs lie on different meshes, ",
                         a.to_string(), " and ", b.to_string()));
  }
}

// The output's global shape, after checking that every label has one size.
Shape contraction_shape(const Contraction& labels, const Shape& x, const Shape& kernel) {
  if (labels.x.size() != x.size() || labels.kernel.size() != kernel.size()) {
    throw ShapeError(str("contraction '", labels.x, ",", labels.kernel, "->", labels.output,
                         "': the operands have shapes ", shape_to_string(x), " and ",
                         shape_to_string(kernel), "; expected one label per dimension"));
  }
  auto size_of = [&](char label) -> std::int64_t {
    int in_x = position(labels.x, label), in_kernel = position(labels.kernel, label);
    if (in_x >= 0 && in_kernel >= 0 &&
        x[static_cast<std::size_t>(in_x)] != kernel[static_cast<std::size_t>(in_kernel)]) {
      throw ShapeError(str("contraction '", labels.x, ",", labels.kernel, "->", labels.output,
                           "': label '", label, "' has size ", x[static_cast<std::size_t>(in_x)],
                           " in ", shape_to_string(x), " but ",
                           kernel[static_cast<std::size_t>(in_kernel)], " in ",
                           shape_to_string(kernel)));
    }
    if (in_x >= 0) return x[static_cast<std::size_t>(in_x)];
    if (in_kernel >= 0) return kernel[static_cast<std::size_t>(in_kernel)];
    throw ShapeError(str("contraction '", labels.x, ",", labels.kernel, "->", labels.output,
                         "': output label '", label, "' is in neither operand"));
  };
  for (char label : labels.x + labels.kernel) size_of(label);
  Shape output;
  for (char label : labels.output) output.push_back(size_of(label));
  return output;
}

}  // namespace

Contraction Contraction::dense(int x_rank) {
  std::string leading;
  for (int dim = 0; dim + 1 < x_rank; ++dim) leading += static_cast<char>('a' + dim);
  return {leading + "K", "KN", leading + "N"};
}

OperationSharding contraction(const Contraction& labels, const Sharding& x, const Sharding& kernel) {
  check_not_partial(x, "contraction");
  check_not_partial(kernel, "contraction");
  check_same_mesh(x, kernel, "contraction");
  Shape output_shape = contraction_shape(labels, x.global_shape(), kernel.global_shape());
  const std::size_t axes = x.placements().size();
  std::vector<Placement> x_target = x.placements(), kernel_target = kernel.placements();
  std::vector<Placement> output(axes, Placement::replicate());
  for (std::size_t axis = 0; axis < axes; ++axis) {
    const Placement& on_x = x.placements()[axis];
    const Placement& on_kernel = kernel.placements()[axis];
    const char x_label = on_x.is_shard() ? labels.x[static_cast<std::size_t>(on_x.dim())] : 0;
    const char kernel_label =
        on_kernel.is_shard() ? labels.kernel[static_cast<std::size_t>(on_kernel.dim())] : 0;
    auto in_output = [&](char label) { return label != 0 && position(labels.output, label) >= 0; };
    if (in_output(x_label)) {  // the activation's split is kept (the batch, a sequence, ...)
      output[axis] = Placement::shard(position(labels.output, x_label));
      int in_kernel = position(labels.kernel, x_label);
      kernel_target[axis] = in_kernel >= 0 ? Placement::shard(in_kernel) : Placement::replicate();
    } else if (in_output(kernel_label)) {  // column-parallel
      output[axis] = Placement::shard(position(labels.output, kernel_label));
      int in_x = position(labels.x, kernel_label);
      x_target[axis] = in_x >= 0 ? Placement::shard(in_x) : Placement::replicate();
    } else if (kernel_label != 0) {  // row-parallel: a summand per process
      int in_x = position(labels.x, kernel_label);
      x_target[axis] = in_x >= 0 ? Placement::shard(in_x) : Placement::replicate();
      output[axis] = Placement::partial();
    } else if (x_label != 0) {
      if (position(labels.kernel, x_label) >= 0) {
        x_target[axis] = Placement::replicate();  // contracted against a whole kernel
      } else {
        output[axis] = Placement::partial();  // a dimension x alone sums over
      }
    }
  }
  return {{Sharding(x.mesh(), std::move(x_target), x.global_shape()),
           Sharding(x.mesh(), std::move(kernel_target), kernel.global_shape())},
          Sharding(x.mesh(), std::move(output), std::move(output_shape))};
}

OperationSharding broadcast(const Sharding& main, const Sharding& operand,
                            const std::vector<int>& aligned) {
  check_not_partial(main, "broadcast");
  check_same_mesh(main, operand, "broadcast");
  if (aligned.size() != operand.global_shape().size()) {
    throw ValueError(str("sharding rule 'broadcast': ", aligned.size(), " aligned dimensions for ",
                         operand.to_string(), "; expected one per operand dimension"));
  }
  std::vector<Placement> target(main.placements().size(), Placement::replicate());
  for (std::size_t axis = 0; axis < target.size(); ++axis) {
    const Placement& on_main = main.placements()[axis];
    if (!on_main.is_shard()) continue;
    for (std::size_t j = 0; j < aligned.size(); ++j) {
      // A dimension of size 1 broadcasts: every process needs its one entry.
      if (aligned[j] == on_main.dim() &&
          operand.global_shape()[j] == main.global_shape()[static_cast<std::size_t>(on_main.dim())]) {
        target[axis] = Placement::shard(static_cast<int>(j));
      }
    }
  }
  return {{main, Sharding(main.mesh(), std::move(target), operand.global_shape())}, main};
}

OperationSharding lookup(const Sharding& indices, const Sharding& table) {
  check_not_partial(indices, "lookup");
  check_not_partial(table, "lookup");
  check_same_mesh(indices, table, "lookup");
  if (table.global_shape().size() != 2) {
    throw ShapeError(str("sharding rule 'lookup': the table ", table.to_string(),
                         " must have rank 2 (rows, features)"));
  }
  Shape output_shape = indices.global_shape();
  output_shape.push_back(table.global_shape()[1]);
  const int features = static_cast<int>(output_shape.size()) - 1;
  std::vector<Placement> table_target = table.placements(), output = indices.placements();
  for (std::size_t axis = 0; axis < output.size(); ++axis) {
    // Where the indices differ, every process may need any row: the table is whole there.
    if (indices.placements()[axis].is_shard()) table_target[axis] = Placement::replicate();
    const Placement& on_table = table_target[axis];
    if (!on_table.is_shard()) continue;
    output[axis] = on_table.dim() == 0 ? Placement::partial() : Placement::shard(features);
  }
  return {{indices, Sharding(table.mesh(), std::move(table_target), table.global_shape())},
          Sharding(indices.mesh(), std::move(output), std::move(output_shape))};
}

Sharding reduction(const Sharding& x, const std::vector<int>& dims, bool keep_dims) {
  const int rank = static_cast<int>(x.global_shape().size());
  std::vector<bool> reduced(static_cast<std::size_t>(rank), false);
  for (int dim : dims) {
    int normal = dim < 0 ? dim + rank : dim;
    if (normal < 0 || normal >= rank) {
      throw ValueError(str("sharding rule 'reduction': dimension ", dim, " is out of range for ",
                           x.to_string()));
    }
    reduced[static_cast<std::size_t>(normal)] = true;
  }
  Shape shape;
  std::vector<int> renumbered(static_cast<std::size_t>(rank), -1);
  for (int dim = 0; dim < rank; ++dim) {
    if (reduced[static_cast<std::size_t>(dim)] && !keep_dims) continue;
    renumbered[static_cast<std::size_t>(dim)] = static_cast<int>(shape.size());
    shape.push_back(reduced[static_cast<std::size_t>(dim)] ? 1 : x.global_shape()[static_cast<std::size_t>(dim)]);
  }
  std::vector<Placement> placements = x.placements();
  for (Placement& placement : placements) {
    if (!placement.is_shard()) continue;
    placement = reduced[static_cast<std::size_t>(placement.dim())]
                    ? Placement::partial()
                    : Placement::shard(renumbered[static_cast<std::size_t>(placement.dim())]);
  }
  return Sharding(x.mesh(), std::move(placements), std::move(shape));
}

Sharding resolved(const Sharding& value, const Sharding* preferred) {
  Sharding target = value;
  for (int axis = 0; axis < static_cast<int>(value.placements().size()); ++axis) {
    if (!target.placement(axis).is_partial()) continue;
    Placement wanted = Placement::replicate();
    if (preferred != nullptr && preferred->placement(axis).is_shard()) {
      int holder = target.axis_sharding(preferred->placement(axis).dim());
      if (holder < 0 || holder == axis) wanted = preferred->placement(axis);
    }
    target = target.with(axis, wanted);
  }
  return target;
}

Sharding whole_along(const Sharding& value, int dim) {
  Sharding whole = value;
  for (int axis = value.axis_sharding(dim); axis >= 0; axis = whole.axis_sharding(dim)) {
    whole = whole.with(axis, Placement::replicate());
  }
  return whole;
}

}  // namespace keras::distribution::sharding_rules
