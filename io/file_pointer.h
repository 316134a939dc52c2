// FilePointer: a std::FILE* that is closed when it goes out of scope, for the readers that
// parse a file with stdio (io/idx.cpp, io/safetensors.cpp).
#pragma once
#include <cstdio>
#include <memory>

namespace keras::io {

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};
using FilePointer = std::unique_ptr<std::FILE, FileCloser>;

}  // namespace keras::io
