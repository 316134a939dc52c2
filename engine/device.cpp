// Device names.
#include "engine/device.h"

#include <cctype>
#include <charconv>

#include "engine/errors.h"
#include "engine/gpu_provider.h"

namespace keras {

std::string Device::to_string() const {
  return std::string(type == DeviceType::cpu ? "cpu:" : "gpu:") + std::to_string(index);
}

Device Device::parse(std::string_view text) {
  std::string lower;
  for (char c : text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view type_part = lower;
  int index = 0;
  if (auto colon = lower.find(':'); colon != std::string::npos) {
    type_part = std::string_view(lower).substr(0, colon);
    std::string_view digits = std::string_view(lower).substr(colon + 1);
    auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() ||
        index < 0) {
      throw ValueError(str("invalid device '", text,
                           "': the part after ':' must be a non-negative integer, as in 'gpu:0'"));
    }
  }
  if (type_part == "cpu") return {DeviceType::cpu, index};
  if (type_part == "gpu" || type_part == "cuda") return {DeviceType::gpu, index};
  throw ValueError(str("invalid device '", text, "'; expected 'cpu', 'gpu' or 'gpu:<index>'"));
}

namespace {
Device current_default = Device::cpu();
}  // namespace

Device default_device() { return current_default; }

void set_default_device(Device device) {
  if (device.is_gpu()) {
    const GpuProvider& gpus = gpu_provider();
    if (device.index < 0 || device.index >= gpus.count()) {
      throw ValueError(str("set_default_device(", device.to_string(), "): that GPU does not exist (",
                           gpus.description(), ")"));
    }
  }
  current_default = device;
}

DefaultDeviceScope::DefaultDeviceScope(Device device) : previous_(default_device()) {
  set_default_device(device);
}
DefaultDeviceScope::~DefaultDeviceScope() { current_default = previous_; }

}  // namespace keras
