// The interned texts of index checks (engine/index_check.h). A program has few distinct ones
// (one per op, layer or loss and range), so the table only grows while a program warms up.
#include "engine/index_check.h"

#include <map>
#include <mutex>
#include <vector>

#include "engine/errors.h"

namespace keras {
namespace {
struct MessageTable {
  std::mutex mutex;
  std::map<std::string, int, std::less<>> ids;
  std::vector<std::string> texts;
};
MessageTable& table() {
  static MessageTable instance;
  return instance;
}
}  // namespace

IndexCheck make_index_check(std::int64_t lower, std::int64_t upper, const std::string& message) {
  if (message.find("{}") == std::string::npos) {
    throw Error(str("internal error: the index check message '", message, "' has no {}"));
  }
  MessageTable& messages = table();
  std::lock_guard lock(messages.mutex);
  auto [position, inserted] = messages.ids.try_emplace(message, 0);
  if (inserted) {
    position->second = static_cast<int>(messages.texts.size());
    messages.texts.push_back(message);
  }
  return IndexCheck{lower, upper, position->second};
}

std::string index_error_message(int message, long long index) {
  MessageTable& messages = table();
  std::string text;
  {
    std::lock_guard lock(messages.mutex);
    if (message < 0 || static_cast<std::size_t>(message) >= messages.texts.size()) {
      return str("internal error: index ", index, " failed the unknown index check ", message);
    }
    text = messages.texts[static_cast<std::size_t>(message)];
  }
  return text.replace(text.find("{}"), 2, std::to_string(index));
}

}  // namespace keras
