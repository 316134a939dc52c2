// What one training step sends: every collective that the redistribution ops and the gradient
// reducer issue (forward and backward) is counted here, by kind and mesh axis, while a
// CollectiveLog::Scope is open. The trainer opens one per step; model.summary() prints the last
// step's totals, so a user sees what a layout costs (and that a layout gathers on every step)
// before a long run. Counting is a few additions per collective, against microseconds of
// communication each.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace keras::distribution {

struct CollectiveTotal {
  std::string kind;   // "all_reduce", "all_gather", "reduce_scatter"
  std::string group;  // the process group's name, e.g. "mesh axis 'model'"
  std::int64_t count = 0;
  std::int64_t bytes = 0;  // sum of the full buffers (nccl-tests' "size")
};

class CollectiveLog {
 public:
  // Records one collective when a scope is open (a no-op otherwise). `group` is the name of the
  // group; a " (group N)" suffix, which differs between the groups of one axis, is dropped.
  static void record(const char* kind, const std::string& group, std::int64_t bytes);

  class Scope {
   public:
    Scope();
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    std::vector<CollectiveTotal> totals() const;  // in first-seen order
  };
};

}  // namespace keras::distribution
