// Helper for tests/interop/check_safetensors.py: writes a safetensors file with known tensors
// through keras::io, or checks that a file Python's safetensors library wrote loads through
// keras::io with the expected names, dtypes, shapes and values.
//   safetensors_tool write PATH   |   safetensors_tool check PATH
#include <cstdio>
#include <string>

#include "keras.h"

namespace {

std::vector<std::pair<std::string, keras::Tensor>> known_tensors() {
  using keras::Tensor;
  return {{"sequential/dense/kernel", Tensor::from_vector<float>({1.5f, -2.0f, 3.25f, 0.0f, 5.0f, -6.5f}, {2, 3})},
          {"sequential/dense/bias", Tensor::from_vector<double>({0.25, -1e300, 7.0}, {3})},
          {"counts", Tensor::from_vector<std::int64_t>({1, -2, 3000000000LL}, {3})},
          {"small", Tensor::from_vector<std::int32_t>({-7, 8}, {2, 1})},
          {"bytes", Tensor::from_vector<std::uint8_t>({0, 255, 17}, {3})},
          {"scalar", Tensor::scalar(3.5, keras::float32)}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: safetensors_tool write|check PATH\n");
    return 2;
  }
  std::string mode = argv[1], path = argv[2];
  try {
    if (mode == "write") {
      keras::io::save_safetensors(path, known_tensors(), {{"format", "keras-cpp"}});
      return 0;
    }
    if (mode != "check") throw keras::ValueError("mode must be 'write' or 'check', got '" + mode + "'");
    auto loaded = keras::io::load_safetensors(path);
    auto expected = known_tensors();
    if (loaded.size() != expected.size()) {
      std::fprintf(stderr, "expected %zu tensors, got %zu\n", expected.size(), loaded.size());
      return 1;
    }
    for (const auto& [name, tensor] : expected) {
      bool found = false;
      for (const auto& [loaded_name, loaded_tensor] : loaded) {
        if (loaded_name != name) continue;
        found = true;
        if (loaded_tensor.dtype() != tensor.dtype() || loaded_tensor.shape() != tensor.shape() ||
            loaded_tensor.to_vector<double>() != tensor.to_vector<double>()) {
          std::fprintf(stderr, "tensor '%s' differs: %s vs %s\n", name.c_str(),
                       loaded_tensor.to_string().c_str(), tensor.to_string().c_str());
          return 1;
        }
      }
      if (!found) {
        std::fprintf(stderr, "tensor '%s' is missing\n", name.c_str());
        return 1;
      }
    }
    return 0;
  } catch (const keras::Error& error) {
    std::fprintf(stderr, "safetensors_tool: %s\n", error.what());
    return 1;
  }
}
