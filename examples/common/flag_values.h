// The examples' flag values, read whole and checked, so that a typo is an error naming the
// flag and what it got rather than a silent default: any number (flag_value<T>), a count of at
// least 1 (positive_count) or a real number above 0 (positive_real). Shared by every example's
// main.cpp; each keeps its own loop over its own flags.
#pragma once
#include <charconv>
#include <cstdint>
#include <string>
#include <system_error>

#include "engine/errors.h"

namespace keras::examples {

template <typename T>
T flag_value(const std::string& flag, const std::string& text) {
  T value{};
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    throw ValueError(str(flag, ": '", text, "' is not a valid number"));
  }
  return value;
}

inline std::int64_t positive_count(const std::string& flag, const std::string& text) {
  const auto value = flag_value<std::int64_t>(flag, text);
  if (value < 1) throw ValueError(str(flag, ": expected a positive integer, got '", text, "'"));
  return value;
}

inline double positive_real(const std::string& flag, const std::string& text) {
  const auto value = flag_value<double>(flag, text);
  if (!(value > 0)) throw ValueError(str(flag, ": expected a number > 0, got '", text, "'"));
  return value;
}

}  // namespace keras::examples
