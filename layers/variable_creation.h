// The one place where a layer's variables get their initial value. Today it evaluates the
// initializer on the full shape. The distribution module (next issue) plugs in here: it will
// ask distribution() for the variable's layout and create only this process's shard, through
// Initializer::block, which produces any block with the values it has in the full tensor.
#pragma once
#include <string>

#include "engine/initializers.h"

namespace keras {

Tensor create_variable(const std::string& path, const Shape& shape, DType dtype,
                       const initializers::Initializer& initializer);

}  // namespace keras
