// Parsing of KERAS_* environment variables (see environment.h).
#include "engine/environment.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <system_error>

#include "engine/errors.h"

namespace keras::environment {

std::optional<std::string> get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::int64_t parse_integer(std::string_view name, std::string_view text, std::int64_t minimum,
                           std::int64_t maximum) {
  auto not_an_integer = [&] {
    return ValueError(str(name, "=", quote_input(text), " is not an integer; expected an integer in [",
                          minimum, ", ", maximum, "]"));
  };
  // As Python's int(str): whitespace around, one sign, digits with single underscores between.
  constexpr std::string_view kWhitespace = " \t\n\r\f\v";
  std::string_view body = text;
  std::size_t first = body.find_first_not_of(kWhitespace);
  if (first == std::string_view::npos) throw not_an_integer();
  body = body.substr(first, body.find_last_not_of(kWhitespace) - first + 1);
  std::string digits;
  if (body.front() == '+' || body.front() == '-') {
    if (body.front() == '-') digits.push_back('-');
    body.remove_prefix(1);
  }
  for (std::size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    bool between_digits = c == '_' && i > 0 && i + 1 < body.size() && body[i - 1] != '_' && body[i + 1] != '_';
    if (c >= '0' && c <= '9') {
      digits.push_back(c);
    } else if (!between_digits) {
      throw not_an_integer();
    }
  }
  if (digits.empty() || digits == "-") throw not_an_integer();
  std::int64_t value = 0;
  auto [stop, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error == std::errc::invalid_argument || stop != digits.data() + digits.size()) throw not_an_integer();
  if (error == std::errc::result_out_of_range || value < minimum || value > maximum) {
    throw ValueError(str(name, "=", quote_input(text), " is out of range; expected an integer in [",
                         minimum, ", ", maximum, "]"));
  }
  return value;
}

std::chrono::milliseconds parse_seconds(std::string_view name, std::string_view text,
                                        double minimum_seconds, double maximum_seconds) {
  double value = 0;
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value, std::chars_format::general);
  // from_chars accepts "inf" and "nan"; neither is a duration.
  if (text.empty() || error == std::errc::invalid_argument || stop != end || std::isnan(value)) {
    throw ValueError(str(name, "=", quote_input(text), " is not a number of seconds; expected a ",
                         "decimal number in [", minimum_seconds, ", ", maximum_seconds, "]"));
  }
  if (error == std::errc::result_out_of_range || !(value >= minimum_seconds) ||
      !(value <= maximum_seconds)) {
    throw ValueError(str(name, "=", quote_input(text), " is out of range; expected a number of ",
                         "seconds in [", minimum_seconds, ", ", maximum_seconds, "]"));
  }
  // Whatever range a caller gives, no value may reach 2^63 ms (llround would overflow).
  if (value >= 9.2e15) {
    throw ValueError(str(name, "=", quote_input(text), " is out of range; expected a number of ",
                         "seconds below 9.2e15"));
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(value * 1000.0)));
}

std::optional<std::int64_t> integer(const char* name, std::int64_t minimum, std::int64_t maximum) {
  const char* text = std::getenv(name);
  if (text == nullptr) return std::nullopt;
  if (*text == '\0') {
    throw ValueError(str(name, " is set but empty; expected an integer in [", minimum, ", ", maximum,
                         "], or leave it unset"));
  }
  return parse_integer(name, text, minimum, maximum);
}

std::optional<std::chrono::milliseconds> seconds(const char* name, double minimum_seconds,
                                                 double maximum_seconds) {
  std::optional<std::string> text = get(name);
  if (!text) return std::nullopt;
  return parse_seconds(name, *text, minimum_seconds, maximum_seconds);
}

}  // namespace keras::environment
