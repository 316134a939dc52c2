// Which function makes a layer from Keras' serialized form ({"module", "class_name", "config",
// "registered_name"} in a .keras archive's config.json): the built-in layers by Keras' class
// name, and layers of one's own by the registered_name Keras gives them
// (@keras.saving.register_keras_serializable(package="my_package") makes "my_package>MyLayer").
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "layers/layer.h"
#include "layers/layer_config.h"

namespace keras {

using LayerFactory = std::function<LayerPtr(LayerConfig& config)>;

// Registers a layer class of one's own for load_model and Model::save: `registered_name` is
// Keras' ("my_package>MyLayer"), `class_name` what the layer's class_name() returns. The factory
// reads the fields its get_config() wrote; name, trainable and dtype are read for it.
void register_layer(const std::string& registered_name, const std::string& class_name, LayerFactory factory);

namespace saving {

// A layer made from Keras' serialized form. Throws NotImplementedError for a class keras-cpp
// cannot make or a field it does not support (naming the layer and the field), FileFormatError
// for a malformed one.
LayerPtr layer_from_config(const nlohmann::json& serialized);
// `layer` in Keras' serialized form: a built-in under module "keras.layers", a registered one
// under its package and registered_name. Throws ValueError for a class neither built in nor
// registered (Keras could not load it either).
nlohmann::json serialize_layer(const Layer& layer);

}  // namespace saving
}  // namespace keras
