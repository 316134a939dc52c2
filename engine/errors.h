// Typed exceptions of keras-cpp. Every message says what was received and what was expected,
// so a user can fix the call without reading our source. `str(...)` builds those messages.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

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

// Concatenates anything printable into one string: str("got ", 3, " dims").
template <typename... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

}  // namespace keras
