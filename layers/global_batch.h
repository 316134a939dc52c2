// Where this process's rows sit in the global batch being trained on. The trainer sets it under
// data parallelism; random layers (Dropout) then draw, for each global row, exactly the numbers
// one process would draw for it, through the counter-based RNG's slices. That keeps the
// data-parallel invariant (same weights as one process) for models with dropout.
#pragma once
#include <cstdint>

namespace keras {

struct GlobalBatchRows {
  std::int64_t total = 0;   // rows of the global batch
  std::int64_t offset = 0;  // index of this process's first row in it
  std::int64_t local = 0;   // rows this process holds
};

// The rows of the current step, or null outside data-parallel training.
const GlobalBatchRows* global_batch_rows();

class GlobalBatchScope {
 public:
  explicit GlobalBatchScope(GlobalBatchRows rows);
  ~GlobalBatchScope();
  GlobalBatchScope(const GlobalBatchScope&) = delete;
  GlobalBatchScope& operator=(const GlobalBatchScope&) = delete;

 private:
  const GlobalBatchRows* previous_;
  GlobalBatchRows rows_;
};

}  // namespace keras
