// agree_on_failure: one all-reduce of a failure flag over the world.
#include "distribution/runtime/shared_outcome.h"

#include <cstdint>

#include "distribution/runtime/runtime.h"
#include "engine/errors.h"

namespace keras::distribution {

bool processes_train_together() { return world().size() > 1; }

void agree_on_failure(std::exception_ptr failure, const std::string& what) {
  Communicator& everyone = world();
  if (processes_train_together()) {
    std::int64_t failed = failure ? 1 : 0;
    everyone.all_reduce(&failed, 1, DType::int64, ReduceOperation::max);
    if (failed != 0 && !failure) {
      throw Error(str(what, " failed on another process (its message says why); process ",
                      everyone.rank(), " stops with it"));
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace keras::distribution
