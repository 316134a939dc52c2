// Reading and writing the safetensors format (https://github.com/huggingface/safetensors), the
// weight-file format Keras 3 and the Hugging Face ecosystem share. A file is an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype, shape and byte range,
// then the raw row-major data. Saving is atomic (a crash never leaves a half-written file) and
// loading validates every field a corrupt or hostile file could get wrong before trusting it.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace keras::io {

// Writes `tensors` (in the given order, contiguous) and string `metadata` to `path`, replacing
// any existing file only once the new one is complete on disk. GPU tensors are copied to the
// CPU first. Supported dtypes: float32, float64, int32, int64, uint8, bool, bfloat16 (BF16), float16 (F16).
// Throws ValueError for empty, duplicate or reserved ("__metadata__") names and undefined
// tensors, FileNotFoundError when the file cannot be created, Error when writing fails.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads every tensor of `path` onto the CPU, in the order of their data offsets, and stores the
// header's "__metadata__" in `*metadata` when it is given. Throws FileNotFoundError for a missing
// file and FileFormatError, naming the file and the bad field, for anything corrupt.
std::vector<std::pair<std::string, Tensor>> load_safetensors(
    const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

}  // namespace keras::io
