// A model's config.json in a .keras archive, both ways, as Keras 3.15 writes it: a Sequential
// (its layers, an InputLayer first giving the input shape) and a functional model (each layer
// with the calls that feed it, "inbound_nodes", whose arguments name the producing layer, call
// and output: "keras_history": ["dense", 0, 0]; then "input_layers" and "output_layers").
// Subclassed models have no config Keras could rebuild them from, here as in Keras.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>

namespace keras {
class Model;
namespace saving {

// Throws ValueError for a model that has no config (subclassed, or not yet built).
nlohmann::json model_config(Model& model);
// The model a config describes, built (so its weights exist); not compiled. Errors name the
// layer and the field (layer_registry.h), or what in the graph cannot be made.
std::shared_ptr<Model> model_from_config(const nlohmann::json& config);

}  // namespace saving
}  // namespace keras
