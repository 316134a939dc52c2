// This thread's sharded-op handler (see op_dispatch.h).
#include "engine/op_dispatch.h"

namespace keras {
namespace {
thread_local const ShardedOpHandler* installed_handler = nullptr;
}  // namespace

const ShardedOpHandler* sharded_op_handler() { return installed_handler; }

ShardedOpScope::ShardedOpScope(const ShardedOpHandler* handler) : previous_(installed_handler) {
  installed_handler = handler;
}

ShardedOpScope::~ShardedOpScope() { installed_handler = previous_; }

}  // namespace keras
