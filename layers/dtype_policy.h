// Keras' dtype policies (keras.DTypePolicy, keras.mixed_precision): which dtype a layer stores
// its variables in and which it computes in. "mixed_bfloat16" keeps float32 variables (the
// master weights the optimizer updates) and computes in bfloat16; "mixed_float16" the same in
// float16 (pair it with LossScaleOptimizer, engine/optimizers.h); "float32", "float64",
// "bfloat16" and "float16" store and compute in that one dtype. A layer takes the global policy
// when it is made; inside its call() it casts floating inputs to the compute dtype and every op
// reads its variables in the compute dtype (engine/op_dispatch.h, autocast), as Keras does.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "engine/dtype.h"
#include "engine/op_dispatch.h"

namespace keras {

class DTypePolicy {
 public:
  DTypePolicy();  // "float32"
  // Throws ValueError naming the policies there are for any other name.
  explicit DTypePolicy(std::string_view name);

  const std::string& name() const { return name_; }
  DType compute_dtype() const { return compute_dtype_; }
  DType variable_dtype() const { return variable_dtype_; }
  // The autocast a layer's call installs: set when compute and variable dtypes differ.
  std::optional<Autocast> autocast() const;
  bool operator==(const DTypePolicy& other) const { return name_ == other.name_; }

 private:
  std::string name_;
  DType compute_dtype_;
  DType variable_dtype_;
};

namespace mixed_precision {
// keras.mixed_precision.set_global_policy: the policy of every layer made from now on (layers
// already made keep theirs). Not for concurrent use with making layers on other threads.
void set_global_policy(const DTypePolicy& policy);
void set_global_policy(std::string_view name);
DTypePolicy global_policy();
}  // namespace mixed_precision

}  // namespace keras
