// Keras' layer configs (the "config" of each layer in a .keras archive's config.json): reading
// one field by field, so that every field is either understood or refused — a field Keras has
// and keras-cpp does not support (a regularizer, a mixed dtype policy) is an error naming the
// layer and the field, never ignored — and writing the pieces Keras' configs share (dtype
// policies, initializers, activations). Each layer writes its config in get_config() and is
// made from one by its from_config(), beside its constructor; saving/layer_registry.h maps
// Keras' class names to them.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/initializers.h"
#include "layers/dtype_policy.h"

namespace keras {

class LayerConfig {
 public:
  // `config` must be a JSON object (else FileFormatError); `class_name` words the errors.
  LayerConfig(const nlohmann::json& config, std::string class_name);

  const std::string& class_name() const { return class_name_; }
  // The layer's name ("" when the config has none: a unique one is made).
  std::string name();

  // Typed fields: absent (or null) gives `fallback`, and without one is an error; a value of
  // the wrong type is a FileFormatError naming the layer and the field.
  std::int64_t integer(const char* key, std::optional<std::int64_t> fallback = std::nullopt);
  double number(const char* key, std::optional<double> fallback = std::nullopt);
  bool boolean(const char* key, std::optional<bool> fallback = std::nullopt);
  std::string string(const char* key, std::optional<std::string> fallback = std::nullopt);
  // An integer or a list of them (Keras' kernel_size 3 or [3, 3]).
  std::vector<std::int64_t> integers(const char* key,
                                     std::optional<std::vector<std::int64_t>> fallback = std::nullopt);
  // A list of integers that may hold null (a shape with its batch dimension: [null, 8]).
  std::vector<std::optional<std::int64_t>> shape(const char* key);
  // The field as it is (absent: nullopt); the caller checks it.
  std::optional<nlohmann::json> take(const char* key);
  // A field keras-cpp supports only at Keras' default: absent, null, or one of `accepted`.
  void only(const char* key, const std::vector<nlohmann::json>& accepted = {});
  // An activation by Keras name ("linear" is none: ""); a serialized function object is refused.
  std::string activation(const char* key);
  // An initializer's config (a name or Keras' serialized object); null when absent.
  initializers::InitializerPtr initializer(const char* key);
  // A dtype policy: its name or Keras' DTypePolicy object of it (float32 when absent); an
  // unknown one is refused.
  DTypePolicy dtype(const char* key);

  // Throws NotImplementedError naming the layer and the field.
  [[noreturn]] void unsupported(const char* key, const std::string& why) const;
  // Throws FileFormatError naming the layer and the field.
  [[noreturn]] void malformed(const char* key, const std::string& expected) const;
  // Every field must have been read: one that was not is an error naming it.
  void finish() const;

 private:
  const nlohmann::json* find(const char* key);
  std::string where() const;
  nlohmann::json config_;
  std::string class_name_;
  std::vector<std::string> read_;
};

// Keras' snake_case of a class name: "GlobalAveragePooling2D" -> "global_average_pooling2d",
// "ReLU" -> "re_lu" (a layer's default name, and its group in weight files).
std::string to_snake_case(const std::string& class_name);
// The other way, as Keras' class names are spelt from snake_case ones: "glorot_uniform" ->
// "GlorotUniform", "layer_normalization" -> "LayerNormalization".
std::string from_snake_case(const std::string& name);

namespace config_json {

// Keras' serialized object: {"module", "class_name", "config", "registered_name": null}.
nlohmann::json serialized(const std::string& module, const std::string& class_name,
                          nlohmann::json config);
// The float32 DTypePolicy object every layer's config carries.
nlohmann::json dtype_policy(const DTypePolicy& policy);
// An initializer as Keras serializes it (null pointer: `default_name`'s).
nlohmann::json initializer(const initializers::InitializerPtr& initializer, const std::string& default_name);
// Ours ("" for none) to Keras' ("linear").
std::string activation(const std::string& name);

}  // namespace config_json
}  // namespace keras
