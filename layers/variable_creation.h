// The one place where a layer's variables get their initial value. It asks distribution() for
// the variable's layout and checks that the layout fits the shape. Replicated variables (all of
// them under DataParallel) get the full value, equal on every process because initialize() made
// the processes agree on the seed. A sharded variable gets only this process's block, through
// Initializer::block, which produces any block with the values it has in the full tensor.
#pragma once
#include <string>

#include "engine/initializers.h"

namespace keras {

Tensor create_variable(const std::string& path, const Shape& shape, DType dtype,
                       const initializers::Initializer& initializer);

}  // namespace keras
