// The global device list (distribution/api/device_listing.h).
#include "distribution/api/device_listing.h"

#include <cctype>

#include "distribution/runtime/runtime.h"
#include "engine/errors.h"
#include "engine/gpu_runtime.h"

namespace keras::distribution {

std::vector<std::string> list_devices(std::optional<std::string> device_type) {
  std::string type;
  // Keras: an empty device_type (like None) means the default type.
  if (device_type && device_type->empty()) device_type.reset();
  if (device_type) {
    for (char c : *device_type) type += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (type != "cpu" && type != "gpu") {
      throw ValueError(str("unknown device type '", *device_type, "'; expected 'cpu' or 'gpu'"));
    }
  } else {
    type = gpu::device_count() > 0 ? "gpu" : "cpu";
  }
  if (type == "gpu" && gpu::device_count() == 0) {
    throw ValueError("list_devices('gpu'): this machine (or this build) has no GPU");
  }
  std::vector<std::string> devices;
  for (int i = 0; i < num_processes(); ++i) devices.push_back(type + ":" + std::to_string(i));
  return devices;
}

int get_device_count(std::optional<std::string> device_type) {
  return static_cast<int>(list_devices(std::move(device_type)).size());
}

}  // namespace keras::distribution
