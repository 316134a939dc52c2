// The step context (see the header).
#include "distribution/sharding/step_context.h"

namespace keras::distribution {
namespace {
// The outermost open step context of this thread, or null.
thread_local const StepContext* open_step = nullptr;
thread_local const ShardingContext* open_sharding = nullptr;
}  // namespace

StepContext::StepContext() {
  if (open_step != nullptr) return;
  outermost_ = true;
  sharding_ = ShardingContext::current();
  open_step = this;
  open_sharding = sharding_ ? &*sharding_ : nullptr;
}

StepContext::~StepContext() {
  if (!outermost_) return;
  open_step = nullptr;
  open_sharding = nullptr;
}

const ShardingContext* StepContext::sharding() { return open_sharding; }

}  // namespace keras::distribution
