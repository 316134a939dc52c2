// Gradient norms over the processes (see the header).
#include "distribution/runtime/gradient_norms.h"

#include "distribution/runtime/runtime.h"
#include "distribution/sharding/sharded_tensor.h"
#include "engine/errors.h"

namespace keras::distribution {

void sum_squared_norms_over_processes(const std::vector<Tensor>& variables, std::vector<double>& squared_norms) {
  if (variables.size() != squared_norms.size()) {
    throw ValueError(str("sum_squared_norms_over_processes: got ", variables.size(), " variables and ",
                         squared_norms.size(), " squared norms; expected one norm per variable"));
  }
  Communicator& group = world();
  if (group.size() == 1 || squared_norms.empty()) return;
  for (std::size_t i = 0; i < variables.size(); ++i) {
    std::int64_t blocks = 1;
    if (std::optional<Sharding> sharding = sharding_of(variables[i])) {
      const Shape& mesh_shape = sharding->mesh()->shape();
      for (std::size_t axis = 0; axis < mesh_shape.size(); ++axis) {
        if (sharding->placement(static_cast<int>(axis)).is_shard()) blocks *= mesh_shape[axis];
      }
    }
    // Each distinct block lies on size / blocks processes (a mesh spans the job's processes).
    const double holders = static_cast<double>(group.size()) / static_cast<double>(blocks);
    squared_norms[i] /= holders;
  }
  group.all_reduce(squared_norms.data(), static_cast<std::int64_t>(squared_norms.size()), DType::float64,
                   ReduceOperation::sum);
}

}  // namespace keras::distribution
