// oneDNN on the engine's one thread pool: Debian's oneDNN runs on OpenMP, and an OpenMP team
// beside our pool would spin on the same two cores (engine/thread_pool.h). Every call into
// oneDNN comes from a pool thread with OpenMP held to that one thread.
#pragma once
#include <omp.h>

namespace keras::cpu {

inline void limit_openmp_to_this_thread() {
  thread_local bool done = false;
  if (!done) {
    omp_set_num_threads(1);
    done = true;
  }
}

}  // namespace keras::cpu
