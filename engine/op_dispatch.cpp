// This thread's sharded-op handler and autocast, and the seam that applies them (see
// op_dispatch.h).
#include "engine/op_dispatch.h"

#include <string>

#include "engine/ops.h"

namespace keras {
namespace {
thread_local const ShardedOpHandler* installed_handler = nullptr;
thread_local const Autocast* installed_autocast = nullptr;
}  // namespace

const Autocast* autocast_policy() { return installed_autocast; }

AutocastScope::AutocastScope(std::optional<Autocast> autocast)
    : current_(autocast), previous_(installed_autocast) {
  installed_autocast = current_ ? &*current_ : nullptr;
}

AutocastScope::~AutocastScope() { installed_autocast = previous_; }

namespace ops::detail {

Tensor through_handler(OpCall call) {
  // An assignment writes the variable itself: it is never read as a copy.
  const Autocast* autocast = call.family == OpFamily::assign ? nullptr : autocast_policy();
  if (autocast != nullptr) {
    const Autocast policy = *autocast;
    // The casts run without autocast (they would come back here) and without the sharded
    // handler: a cast of the stored block keeps the variable's annotation (element-wise ops
    // inherit it with no handler), so the copy lies exactly as the variable does, whatever
    // its layout. It keeps the variable's name too: the handler tells a variable's blocks
    // from an activation's by it (a variable split over the batch axis is gathered, an
    // activation's rows are not), and a copy in the compute dtype is never cast again.
    AutocastScope casting(std::nullopt);
    ShardedOpScope on_the_block(nullptr);
    for (Tensor& operand : call.operands) {
      if (!is_autocast(operand, &policy)) continue;
      std::string name = operand.impl()->name;
      operand = cast(operand, policy.compute_dtype);
      operand.set_name(std::move(name));
    }
  }
  if (const ShardedOpHandler* handler = sharded_op_handler()) {
    // The draws and the batch mean go through the handler annotated or not (an unannotated
    // activation is this process's rows of the global batch); the other families when an
    // operand is annotated, as goes_through_handler asks.
    if (call.family == OpFamily::random || call.family == OpFamily::batch) return handler->dispatch(call);
    for (const Tensor& operand : call.operands) {
      if (operand.defined() && operand.annotation()) return handler->dispatch(call);
    }
  }
  return call.compute(call.operands);
}

}  // namespace ops::detail

const ShardedOpHandler* sharded_op_handler() { return installed_handler; }

ShardedOpScope::ShardedOpScope(const ShardedOpHandler* handler) : previous_(installed_handler) {
  installed_handler = handler;
}

ShardedOpScope::~ShardedOpScope() { installed_handler = previous_; }

}  // namespace keras
