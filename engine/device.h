// Where a tensor lives: the CPU or one GPU. Written "cpu:0" / "gpu:1" as in Keras.
#pragma once
#include <string>
#include <string_view>

namespace keras {

enum class DeviceType { cpu, gpu };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device gpu(int index = 0) { return {DeviceType::gpu, index}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_gpu() const { return type == DeviceType::gpu; }
  std::string to_string() const;
  // Parses "cpu", "cpu:0", "gpu:3" (case-insensitive type); throws ValueError otherwise.
  static Device parse(std::string_view text);
  friend bool operator==(const Device&, const Device&) = default;
};

// The device layers create their variables on and fit/evaluate/predict move their batches to
// (PyTorch's torch.set_default_device, JAX's default device); the CPU unless set. A GPU that
// does not exist is a ValueError.
Device default_device();
void set_default_device(Device device);

// Sets the default device for its lifetime, then puts the previous one back.
class DefaultDeviceScope {
 public:
  explicit DefaultDeviceScope(Device device);
  ~DefaultDeviceScope();
  DefaultDeviceScope(const DefaultDeviceScope&) = delete;
  DefaultDeviceScope& operator=(const DefaultDeviceScope&) = delete;

 private:
  Device previous_;
};

}  // namespace keras
