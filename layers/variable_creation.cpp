// Variable creation under the global distribution (see the header).
#include "layers/variable_creation.h"

#include "distribution/api/distribution.h"
#include "distribution/runtime/runtime.h"
#include "distribution/sharding/sharded_tensor.h"
#include "engine/errors.h"

namespace keras {

using distribution::Sharding;

Tensor create_variable(const std::string& path, const Shape& shape, DType dtype,
                       const initializers::Initializer& initializer) {
  check_valid_shape(shape, path.c_str());
  if (!is_floating(dtype)) {
    throw DTypeError(str("variable '", path, "' must be floating (float32, float64, bfloat16 or float16), got ",
                         dtype_name(dtype)));
  }
  NoGradGuard no_grad;
  if (auto active = distribution::distribution()) {
    distribution::TensorLayoutPtr layout = active->get_variable_layout({path, shape, nullptr});
    if (layout) {
      layout->check_fits(shape, str("variable '", path, "'"));
      if (!layout->is_replicated()) {
        // One mesh device is one process: a mesh of another size cannot be honoured, and
        // training it unsharded on one process would silently ignore the layout.
        std::int64_t devices = layout->device_mesh()->size();
        if (devices != distribution::num_processes()) {
          throw ValueError(str("variable '", path, "' is sharded by ", layout->to_string(),
                               " over a mesh of ", devices, " devices, but this job has ",
                               distribution::num_processes(),
                               distribution::num_processes() == 1 ? " process" : " processes",
                               "; each mesh device is ",
                               "one process (start that many processes: `mpirun -np ", devices,
                               "`, or by hand with initialize(job_addresses, num_processes, process_id)), or use a mesh of ", distribution::num_processes(),
                               " devices"));
        }
        // This process's block of the full seeded value: equal to the slice of the
        // one-process variable, with no communication.
        Sharding sharding = Sharding::from_layout(*layout, shape, str("variable '", path, "'"));
        auto [starts, sizes] = sharding.block(distribution::process_coordinates(*layout->device_mesh()));
        Tensor block = initializer.block(shape, starts, sizes, dtype).to(default_device()).clone();
        return distribution::with_sharding(block, sharding);
      }
    }
  }
  // Replicated: every process initialises the full value from the same seed (initialize()
  // made the processes agree on it), so the replicas start equal without communication.
  return initializer(shape, dtype).to(default_device()).clone();
}

}  // namespace keras
