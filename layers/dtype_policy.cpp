// Keras' dtype policies and the global one (see dtype_policy.h).
#include "layers/dtype_policy.h"

#include <mutex>

#include "engine/errors.h"

namespace keras {
namespace {

struct GlobalPolicy {
  std::mutex mutex;
  DTypePolicy policy;
};

GlobalPolicy& global() {
  static GlobalPolicy instance;
  return instance;
}

}  // namespace

DTypePolicy::DTypePolicy() : name_("float32"), compute_dtype_(float32), variable_dtype_(float32) {}

DTypePolicy::DTypePolicy(std::string_view name) : name_(name) {
  if (name == "mixed_bfloat16" || name == "mixed_float16") {
    compute_dtype_ = name == "mixed_bfloat16" ? bfloat16 : float16;
    variable_dtype_ = float32;
    return;
  }
  if (name == "float32" || name == "float64" || name == "bfloat16" || name == "float16") {
    compute_dtype_ = variable_dtype_ = dtype_from_name(name);
    return;
  }
  throw ValueError(str("unknown dtype policy '", name, "'; expected one of float32, float64, ",
                       "bfloat16, float16, mixed_bfloat16, mixed_float16 (Keras' names)"));
}

std::optional<Autocast> DTypePolicy::autocast() const {
  if (compute_dtype_ == variable_dtype_) return std::nullopt;
  return Autocast{variable_dtype_, compute_dtype_};
}

namespace mixed_precision {

void set_global_policy(const DTypePolicy& policy) {
  std::lock_guard lock(global().mutex);
  global().policy = policy;
}

void set_global_policy(std::string_view name) { set_global_policy(DTypePolicy(name)); }

DTypePolicy global_policy() {
  std::lock_guard lock(global().mutex);
  return global().policy;
}

}  // namespace mixed_precision
}  // namespace keras
