// Typed exceptions of keras-cpp. Every message says what was received and what was expected,
// so a user can fix the call without reading our source. `str(...)` builds those messages.
#pragma once
#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace keras {

// Base of every error keras-cpp throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// An argument has a value we cannot accept (Keras' ValueError).
class ValueError : public Error {
 public:
  using Error::Error;
};
// Shapes that do not fit together (a subtype of ValueError, as in Keras).
class ShapeError : public ValueError {
 public:
  using ValueError::ValueError;
};
// A tensor of the wrong dtype (Keras' TypeError for dtypes).
class DTypeError : public Error {
 public:
  using Error::Error;
};
// A file that is missing or cannot be opened.
class FileNotFoundError : public Error {
 public:
  using Error::Error;
};
// A file whose contents are corrupt, truncated or of another format.
class FileFormatError : public Error {
 public:
  using Error::Error;
};
// An operation that this build or device cannot run (e.g. a GPU op in a CPU-only build).
class NotImplementedError : public Error {
 public:
  using Error::Error;
};

// Memory could not be allocated (a std::bad_alloc from the system, turned into our type so that
// `catch (keras::Error&)` sees it, with the size and device that were asked for).
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// Text from a user or a file, fit for a message: in single quotes, bytes outside printable ASCII
// written as \xHH, and cut to `limit` characters with the full length said, so that no input of
// any size can flood a message (or take unbounded time to format).
std::string quote_input(std::string_view text, std::size_t limit = 80);

// Concatenates anything printable into one string: str("got ", 3, " dims").
template <typename... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

}  // namespace keras
