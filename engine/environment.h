// The one place KERAS_* environment variables are read and parsed. Every number a user can put
// in the environment goes through parse_integer or parse_seconds, which accept only the whole
// text as a number in a stated range and otherwise throw a ValueError naming the variable, the
// value received (quoted and cut short) and the range expected. Before this helper the four
// readers parsed numbers four ways, and KERAS_COLLECTIVE_TIMEOUT_SECONDS=inf became a negative
// deadline.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace keras::environment {

// The variable's value; nullopt when it is unset or empty (an empty value means "not given").
std::optional<std::string> get(const char* name);

// `text` as a decimal integer in [minimum, maximum], read as Python's int() reads a string (as
// Keras reads KERAS_DISTRIBUTION_NUM_PROCESSES): surrounding whitespace, an optional sign, and
// digits with single underscores between them ("1_000"). `name` is the variable (or argument) it
// came from, for the message.
std::int64_t parse_integer(std::string_view name, std::string_view text, std::int64_t minimum,
                           std::int64_t maximum);
// `text` as a finite decimal number of seconds in [minimum_seconds, maximum_seconds], returned
// in whole milliseconds (a value that would round to 0 ms is below any sane minimum and must be
// refused by the caller's range).
std::chrono::milliseconds parse_seconds(std::string_view name, std::string_view text,
                                        double minimum_seconds, double maximum_seconds);

// The variable parsed; nullopt when unset. An integer variable set but empty is a ValueError
// naming it (Python's int("") is an error too); an empty seconds variable counts as unset.
std::optional<std::int64_t> integer(const char* name, std::int64_t minimum, std::int64_t maximum);
std::optional<std::chrono::milliseconds> seconds(const char* name, double minimum_seconds,
                                                 double maximum_seconds);

}  // namespace keras::environment
