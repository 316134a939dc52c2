// Formatting of user-given text inside error messages.
#include "engine/errors.h"

namespace keras {

std::string quote_input(std::string_view text, std::size_t limit) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out = "'";
  std::size_t shown = 0;
  for (; shown < text.size() && out.size() < limit + 1; ++shown) {
    auto byte = static_cast<unsigned char>(text[shown]);
    if (byte >= 0x20 && byte < 0x7F && byte != '\\' && byte != '\'') {
      out += static_cast<char>(byte);
    } else {
      out += "\\x";
      out += kDigits[byte >> 4];
      out += kDigits[byte & 0xF];
    }
  }
  out += "'";
  if (shown < text.size()) out += str("... (", text.size(), " bytes in all)");
  return out;
}

}  // namespace keras
