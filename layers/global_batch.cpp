// Thread-local global-batch position.
#include "layers/global_batch.h"

namespace keras {
namespace {
thread_local const GlobalBatchRows* current = nullptr;
}

const GlobalBatchRows* global_batch_rows() { return current; }

GlobalBatchScope::GlobalBatchScope(GlobalBatchRows rows) : previous_(current), rows_(rows) {
  current = &rows_;
}

GlobalBatchScope::~GlobalBatchScope() { current = previous_; }

}  // namespace keras
