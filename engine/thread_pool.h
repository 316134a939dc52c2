// The one thread pool of the engine. Two spinning pools on two cores slowed PyTorch 4x here
// (measured), so all CPU parallelism goes through this pool, its idle workers sleep on a
// condition variable, and the BLAS kernels it calls run single-threaded.
#pragma once
#include <cstdint>
#include <functional>

namespace keras {

// Number of threads (the caller counts as one). Defaults to the hardware cores;
// KERAS_NUM_THREADS overrides it at start-up, set_num_threads later.
int num_threads();
void set_num_threads(int count);

// Splits [0, count) into at most num_threads() contiguous ranges of at least `grain` items and
// runs body(begin, end) on each, the calling thread included; returns when all are done.
// Runs inline when the work is small or when called from inside another parallel_for.
void parallel_for(std::int64_t count, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& body);

}  // namespace keras
