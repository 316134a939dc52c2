// A LayoutMap key, compiled once, matched against whole variable and activation paths as
// Python's re.fullmatch does (Keras >= 3.14). Keys are written by Keras users in Python re's
// dialect: inline flags ("(?i)dense.*"), named groups ("(?P<layer>dense_\d+)/kernel"),
// lookarounds ("(?!.*lora).*kernel") and back-references. std::regex has none of the first
// two, recurses once per character matched, and had undefined behaviour on large counts (found
// by tests/fuzz/layout_fuzzer). PCRE2 (Debian's libpcre2) reads that dialect, and its match
// and depth limits turn a pathological key into a ValueError rather than a hang. RE2 was the
// other candidate: linear time, but no lookarounds or back-references, which the LoRA
// exclusions people write ("(?!.*lora)") need. One known difference from Python: "\8" and
// "\9" without such groups are literal digits here (Perl's reading), an error in Python.
#pragma once
#include <memory>
#include <string>

namespace keras::distribution {

class LayoutPattern {
 public:
  // ValueError naming the key and PCRE2's reason when it is not a valid expression.
  explicit LayoutPattern(const std::string& key);
  // Whether the whole of `path` matches. ValueError when matching needs more than the match
  // limit (a key with nested quantifiers against a long path).
  bool full_match(const std::string& path) const;
  const std::string& key() const { return key_; }

 private:
  std::string key_;
  std::shared_ptr<void> code_;  // pcre2_code, freed by pcre2_code_free
};

}  // namespace keras::distribution
