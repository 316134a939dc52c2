// keras::version(): the version this library was built as (from the generated header, so one
// number in CMakeLists.txt sets the package version, the header and this).
#include "engine/version.h"

namespace keras {

std::string version() { return KERAS_VERSION_STRING; }

}  // namespace keras
