// The table of built-in layer classes load_model can make, and the registry of one's own.
#include "saving/layer_registry.h"

#include <map>
#include <mutex>

#include "engine/errors.h"
#include "layers/basic_layers.h"
#include "layers/batch_normalization.h"
#include "layers/convolution_layers.h"
#include "layers/dense.h"
#include "layers/einsum_dense.h"
#include "layers/input_layer.h"
#include "layers/merging.h"
#include "layers/multi_head_attention.h"

namespace keras {
namespace {

using LayerFactoryPointer = LayerPtr (*)(LayerConfig&);

// Keras' class name -> from_config, for every built-in layer that has one.
const std::map<std::string, LayerFactoryPointer>& builtin_layers() {
  static const std::map<std::string, LayerFactoryPointer> table = {
      {"Activation", &layers::Activation::from_config},
      {"Add", &layers::Add::from_config},
      {"Average", &layers::Average::from_config},
      {"AveragePooling2D", &layers::AveragePooling2D::from_config},
      {"BatchNormalization", &layers::BatchNormalization::from_config},
      {"Concatenate", &layers::Concatenate::from_config},
      {"Conv2D", &layers::Conv2D::from_config},
      {"Dense", &layers::Dense::from_config},
      {"Dropout", &layers::Dropout::from_config},
      {"EinsumDense", &layers::EinsumDense::from_config},
      {"Embedding", &layers::Embedding::from_config},
      {"Flatten", &layers::Flatten::from_config},
      {"GlobalAveragePooling2D", &layers::GlobalAveragePooling2D::from_config},
      {"InputLayer", &layers::InputLayer::from_config},
      {"LayerNormalization", &layers::LayerNormalization::from_config},
      {"MaxPooling2D", &layers::MaxPooling2D::from_config},
      {"Maximum", &layers::Maximum::from_config},
      {"Minimum", &layers::Minimum::from_config},
      {"MultiHeadAttention", &layers::MultiHeadAttention::from_config},
      {"Multiply", &layers::Multiply::from_config},
      {"ReLU", &layers::ReLU::from_config},
      {"RMSNormalization", &layers::RMSNormalization::from_config},
      {"Rescaling", &layers::Rescaling::from_config},
      {"Reshape", &layers::Reshape::from_config},
      {"Softmax", &layers::Softmax::from_config},
      {"Subtract", &layers::Subtract::from_config},
  };
  return table;
}

struct Registered {
  std::string class_name;
  LayerFactory factory;
};

struct Registry {
  std::mutex mutex;
  std::map<std::string, Registered> by_registered_name;
  std::map<std::string, std::string> registered_name_of_class;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

std::string builtin_names() {
  std::string names;
  for (const auto& [name, factory] : builtin_layers()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

}  // namespace

void register_layer(const std::string& registered_name, const std::string& class_name, LayerFactory factory) {
  if (registered_name.empty() || class_name.empty() || !factory) {
    throw ValueError(str("register_layer: needs a registered name, a class name and a factory; got '",
                         registered_name, "', '", class_name, "'", factory ? "" : " and no factory"));
  }
  if (builtin_layers().count(class_name)) {
    throw ValueError(str("register_layer: '", class_name, "' is a built-in layer's class name; give ",
                         "your class another (its class_name())"));
  }
  Registry& table = registry();
  std::lock_guard lock(table.mutex);
  table.by_registered_name[registered_name] = {class_name, std::move(factory)};
  table.registered_name_of_class[class_name] = registered_name;
}

namespace saving {

LayerPtr layer_from_config(const nlohmann::json& serialized) {
  if (!serialized.is_object() || !serialized.contains("class_name") || !serialized["class_name"].is_string()) {
    throw FileFormatError("load_model: a layer is not Keras' serialized form (an object with a "
                          "\"class_name\" string)");
  }
  std::string class_name = serialized["class_name"].get<std::string>();
  std::string registered_name;
  if (auto found = serialized.find("registered_name"); found != serialized.end() && found->is_string()) {
    registered_name = found->get<std::string>();
  }
  LayerFactory factory;
  if (!registered_name.empty() && registered_name != class_name) {
    Registry& table = registry();
    std::lock_guard lock(table.mutex);
    if (auto found = table.by_registered_name.find(registered_name); found != table.by_registered_name.end()) {
      factory = found->second.factory;
    }
  } else if (auto builtin = builtin_layers().find(class_name); builtin != builtin_layers().end()) {
    factory = builtin->second;
  }
  if (!factory) {
    throw NotImplementedError(str(
        "load_model: layer class '", class_name, "'",
        registered_name.empty() || registered_name == class_name ? "" : str(" (registered as '", registered_name, "')"),
        " is not one keras-cpp can make from a config; it makes ", builtin_names(),
        ", and layers of one's own registered with keras::register_layer"));
  }
  nlohmann::json config = serialized.contains("config") ? serialized["config"] : nlohmann::json::object();
  LayerConfig reader(config, class_name);
  LayerPtr layer = factory(reader);
  if (!layer) throw ValueError(str("load_model: the factory of '", class_name, "' made no layer"));
  if (class_name != "InputLayer") {
    layer->set_trainable(reader.boolean("trainable", true));
    layer->set_dtype_policy(reader.dtype("dtype"));
  }
  reader.finish();
  return layer;
}

nlohmann::json serialize_layer(const Layer& layer) {
  std::string class_name = layer.class_name();
  nlohmann::json config = layer.get_config();
  if (builtin_layers().count(class_name)) {
    return {{"module", "keras.layers"}, {"class_name", class_name}, {"config", std::move(config)},
            {"registered_name", nullptr}};
  }
  std::string registered_name;
  {
    Registry& table = registry();
    std::lock_guard lock(table.mutex);
    if (auto found = table.registered_name_of_class.find(class_name); found != table.registered_name_of_class.end()) {
      registered_name = found->second;
    }
  }
  if (registered_name.empty()) {
    throw ValueError(str("save: layer '", layer.name(), "' is of class '", class_name,
                         "', which keras-cpp cannot make from a config; register it with "
                         "keras::register_layer(\"my_package>", class_name, "\", \"", class_name,
                         "\", factory) so load_model can"));
  }
  std::size_t separator = registered_name.find('>');
  std::string module = separator == std::string::npos ? "" : registered_name.substr(0, separator);
  return {{"module", module}, {"class_name", class_name}, {"config", std::move(config)},
          {"registered_name", registered_name}};
}

}  // namespace saving
}  // namespace keras
