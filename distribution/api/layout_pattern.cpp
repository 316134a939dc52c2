// LayoutMap keys on PCRE2 (see the header).
#include "distribution/api/layout_pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "engine/errors.h"

namespace keras::distribution {
namespace {

// Backtracking steps and nesting one match may use. A path is a few dozen characters; the
// widest real key we know of ("(?!.*lora).*(query|key|value).*kernel") takes a few hundred
// steps on it. A million is far above that and still a few milliseconds at worst.
constexpr std::uint32_t kMatchLimit = 1'000'000;
constexpr std::uint32_t kDepthLimit = 10'000;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  int length = pcre2_get_error_message(code, buffer, sizeof buffer);
  return length < 0 ? str("PCRE2 error ", code) : std::string(reinterpret_cast<char*>(buffer));
}

pcre2_match_context* match_context() {
  // One context for the process: it only holds the limits, and PCRE2 reads it without writing.
  static pcre2_match_context* context = [] {
    pcre2_match_context* created = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(created, kMatchLimit);
    pcre2_set_depth_limit(created, kDepthLimit);
    return created;
  }();
  return context;
}

}  // namespace

LayoutPattern::LayoutPattern(const std::string& key) : key_(key) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // Anchored at both ends: Python's re.fullmatch. UTF and UCP: Python matches str by code
  // point, and \d or \w are Unicode classes there.
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(key.data()), key.size(),
                                   PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_UTF | PCRE2_UCP,
                                   &error, &offset, nullptr);
  if (code == nullptr) {
    throw ValueError(str("LayoutMap key ", quote_input(key), " is not a valid regular expression: ",
                         pcre2_message(error), " at offset ", offset));
  }
  code_ = std::shared_ptr<void>(code, [](void* pointer) { pcre2_code_free(static_cast<pcre2_code*>(pointer)); });
}

bool LayoutPattern::full_match(const std::string& path) const {
  auto* code = static_cast<pcre2_code*>(code_.get());
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> data(
      pcre2_match_data_create_from_pattern(code, nullptr), pcre2_match_data_free);
  int result = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(path.data()), path.size(), 0, 0,
                           data.get(), match_context());
  if (result >= 0) return true;
  if (result == PCRE2_ERROR_NOMATCH) return false;
  if (result == PCRE2_ERROR_MATCHLIMIT || result == PCRE2_ERROR_DEPTHLIMIT) {
    throw ValueError(str("LayoutMap key ", quote_input(key_), " needs more than ", kMatchLimit,
                         " backtracking steps to match ", quote_input(path),
                         "; simplify its nested repetitions"));
  }
  throw ValueError(str("LayoutMap key ", quote_input(key_), " could not be matched against ",
                       quote_input(path), ": ", pcre2_message(result)));
}

}  // namespace keras::distribution
