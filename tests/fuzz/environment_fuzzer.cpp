// libFuzzer harness for the text parsers of the environment: keras::environment::parse_integer
// and parse_seconds (engine/environment.h) and keras::distribution::parse_job_addresses
// (distribution/runtime/runtime.h). A keras::Error is the expected outcome for bad text; any other
// exception escapes and crashes the harness. Accepted values are checked against an independent
// parse (strtoll, strtod, splitting on commas) and the stated ranges; error messages must stay
// short whatever the text (the parsers quote and cut it).
#include <fuzzer/FuzzedDataProvider.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "distribution/runtime/runtime.h"
#include "engine/environment.h"
#include "engine/errors.h"
#include "fuzz_util.h"

namespace {

using keras::fuzz::fail;
using keras::str;

// name=, the quoted text (80 characters, then "... (N bytes in all)") and the range.
constexpr std::size_t kMaxMessageOverhead = 300;

bool is_digit(char c) { return c >= '0' && c <= '9'; }

void check_message(const keras::Error& error, const std::string& name,
                   std::size_t overhead = kMaxMessageOverhead) {
  std::string message = error.what();
  if (message.size() > name.size() + overhead) {
    fail(str("a ", message.size(), "-byte error message: ", message.substr(0, 200)));
  }
}

void fuzz_integer(FuzzedDataProvider& in) {
  std::string name = in.ConsumeRandomLengthString(48);
  std::int64_t minimum = in.ConsumeIntegral<std::int64_t>();
  std::int64_t maximum = in.ConsumeIntegral<std::int64_t>();
  if (in.ConsumeBool() && minimum > maximum) std::swap(minimum, maximum);
  std::string text = in.ConsumeRemainingBytesAsString();
  std::int64_t value = 0;
  try {
    value = keras::environment::parse_integer(name, text, minimum, maximum);
  } catch (const keras::Error& error) {
    check_message(error, name);
    return;
  }
  if (value < minimum || value > maximum) {
    fail(str("parse_integer('", text, "') = ", value, ", outside [", minimum, ", ", maximum, "]"));
  }
  // Accepted text is what Python's int() accepts (whitespace around, one sign, decimal digits
  // with single underscores between them), and means what strtoll says its digits mean.
  auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  std::size_t begin = 0, end = text.size();
  while (begin < end && space(text[begin])) ++begin;
  while (end > begin && space(text[end - 1])) --end;
  std::string digits;
  if (begin < end && (text[begin] == '+' || text[begin] == '-')) {
    if (text[begin] == '-') digits.push_back('-');
    ++begin;
  }
  if (begin == end || !is_digit(text[begin]) || !is_digit(text[end - 1])) fail(str("parse_integer accepted '", text, "'"));
  for (std::size_t i = begin; i < end; ++i) {
    if (is_digit(text[i])) {
      digits.push_back(text[i]);
    } else if (text[i] != '_' || !is_digit(text[i + 1])) {  // text[end - 1] is a digit
      fail(str("parse_integer accepted '", text, "'"));
    }
  }
  errno = 0;
  long long expected = std::strtoll(digits.c_str(), nullptr, 10);
  if (errno != 0 || expected != value) {
    fail(str("parse_integer('", text, "') = ", value, ", strtoll says ", expected));
  }
}

double bound(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 5)) {
    case 0: return 0.0;
    case 1: return 0.001;
    case 2: return in.ConsumeFloatingPointInRange(-1.0, 1.0);
    case 3: return in.ConsumeFloatingPointInRange(0.0, 1e6);
    // Callers pass constants "far below 2^63 ms" (environment.h); stay inside that contract.
    default: return in.ConsumeFloatingPointInRange(-1e12, 1e12);
  }
}

void fuzz_seconds(FuzzedDataProvider& in) {
  std::string name = in.ConsumeRandomLengthString(48);
  double minimum = bound(in);
  double maximum = bound(in);
  if (in.ConsumeBool() && minimum > maximum) std::swap(minimum, maximum);
  std::string text = in.ConsumeRemainingBytesAsString();
  std::chrono::milliseconds value{};
  try {
    value = keras::environment::parse_seconds(name, text, minimum, maximum);
  } catch (const keras::Error& error) {
    check_message(error, name);
    return;
  }
  const long long ms = value.count();
  if (minimum > 0.001 && ms <= 0) {
    fail(str("parse_seconds('", text, "', min ", minimum, ") = ", ms, " ms"));
  }
  if (minimum >= 0 && ms < 0) fail(str("parse_seconds('", text, "') = ", ms, " ms"));
  // Rounding to whole milliseconds is monotonic, so the result lies between the rounded bounds.
  if (ms < std::llround(minimum * 1000.0) || ms > std::llround(maximum * 1000.0)) {
    fail(str("parse_seconds('", text, "') = ", ms, " ms, outside [", minimum, ", ", maximum,
             "] s"));
  }
  // And it is what strtod reads, to the millisecond (strtod also reads hex floats and leading
  // spaces, which parse_seconds refuses; so only check that direction).
  char* end = nullptr;
  double expected = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(expected) ||
      std::fabs(expected * 1000.0 - static_cast<double>(ms)) > 0.5 + 1e-9 * std::fabs(expected * 1000.0)) {
    fail(str("parse_seconds('", text, "') = ", ms, " ms, strtod says ", expected, " s"));
  }
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == '\n' || c == 'x' || c == 'X' || c == 'p' || c == 'P') {
      fail(str("parse_seconds accepted '", text, "'"));
    }
  }
}

void fuzz_job_addresses(FuzzedDataProvider& in) {
  std::optional<int> num_processes;
  if (in.ConsumeBool()) {
    num_processes = in.ConsumeBool() ? in.ConsumeIntegralInRange(0, 8) : in.ConsumeIntegral<int>();
  }
  std::string text = in.ConsumeRemainingBytesAsString();
  std::vector<std::string> addresses;
  try {
    addresses = keras::distribution::parse_job_addresses(text, num_processes);
  } catch (const keras::Error& error) {
    check_message(error, "", 2 * kMaxMessageOverhead);  // quotes an address and the whole text
    return;
  }
  // One address is the coordinator's alone, whatever num_processes; a list names every process.
  if (num_processes && addresses.size() > 1 && static_cast<int>(addresses.size()) != *num_processes) {
    fail(str("parse_job_addresses('", text, "') gave ", addresses.size(), " addresses, not ",
             *num_processes));
  }
  std::string joined;
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    const std::string& address = addresses[i];
    if (i > 0) joined += ',';
    joined += address;
    std::size_t colon = address.rfind(':');
    if (address.find(',') != std::string::npos || colon == std::string::npos || colon == 0 ||
        colon + 1 == address.size()) {
      fail(str("parse_job_addresses('", text, "') accepted '", address, "'"));
    }
    long port = 0;
    for (std::size_t c = colon + 1; c < address.size(); ++c) {
      if (!is_digit(address[c]) || port > 65535) fail(str("bad port in '", address, "'"));
      port = port * 10 + (address[c] - '0');
    }
    if (port < 1 || port > 65535) fail(str("port ", port, " accepted in '", address, "'"));
  }
  if (joined != text) fail(str("parse_job_addresses('", text, "') lost text: '", joined, "'"));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  switch (in.ConsumeIntegralInRange(0, 2)) {
    case 0: fuzz_integer(in); break;
    case 1: fuzz_seconds(in); break;
    default: fuzz_job_addresses(in); break;
  }
  return 0;
}
