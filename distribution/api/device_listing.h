// The global device list, as keras.distribution.list_devices: one device per process, of the
// default type (gpu where a GPU is present, else cpu) or the one asked for.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace keras::distribution {

// "cpu:0", "cpu:1", … or "gpu:…". An empty type means the default; unknown types, and "gpu"
// where there is none, are a ValueError.
std::vector<std::string> list_devices(std::optional<std::string> device_type = std::nullopt);
int get_device_count(std::optional<std::string> device_type = std::nullopt);

}  // namespace keras::distribution
