// The thread's global batch (see the header).
#include "engine/global_batch.h"

namespace keras {
namespace {
thread_local const GlobalBatch* current_batch = nullptr;
}  // namespace

const GlobalBatch* GlobalBatch::current() { return current_batch; }

GlobalBatch::Scope::Scope(const GlobalBatch* batch) : previous_(current_batch) { current_batch = batch; }

GlobalBatch::Scope::~Scope() { current_batch = previous_; }

}  // namespace keras
