// Per-step collective totals (see the header).
#include "distribution/runtime/collective_log.h"

#include <mutex>

namespace keras::distribution {
namespace {
std::mutex log_mutex;
int open_scopes = 0;
std::vector<CollectiveTotal> current;
}  // namespace

void CollectiveLog::record(const char* kind, const std::string& group, std::int64_t bytes) {
  std::lock_guard lock(log_mutex);
  if (open_scopes == 0) return;
  std::string name = group.substr(0, group.find(" (group "));
  for (CollectiveTotal& total : current) {
    if (total.kind == kind && total.group == name) {
      total.count += 1;
      total.bytes += bytes;
      return;
    }
  }
  current.push_back({kind, name, 1, bytes});
}

CollectiveLog::Scope::Scope() {
  std::lock_guard lock(log_mutex);
  if (open_scopes++ == 0) current.clear();
}

CollectiveLog::Scope::~Scope() {
  std::lock_guard lock(log_mutex);
  --open_scopes;
}

std::vector<CollectiveTotal> CollectiveLog::Scope::totals() const {
  std::lock_guard lock(log_mutex);
  return current;
}

}  // namespace keras::distribution
