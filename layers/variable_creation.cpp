// Variable creation (see the header for the seam this is).
#include "layers/variable_creation.h"

#include "engine/errors.h"

namespace keras {

Tensor create_variable(const std::string& path, const Shape& shape, DType dtype,
                       const initializers::Initializer& initializer) {
  check_valid_shape(shape, path.c_str());
  if (!is_floating(dtype)) {
    throw DTypeError(str("variable '", path, "' must be float32 or float64, got ",
                         dtype_name(dtype)));
  }
  NoGradGuard no_grad;
  return initializer(shape, dtype).clone();
}

}  // namespace keras
