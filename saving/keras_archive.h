// Keras' .keras archives: a zip of metadata.json, config.json (saving/model_config.h) and
// model.weights.h5 (saving/keras_weights_file.h), stored uncompressed as Keras stores them.
// Model::save writes one and keras::load_model reads one, whether Python Keras or keras-cpp
// wrote it. A hostile archive is a typed error, never a crash or a huge allocation: every
// entry's size is checked against limits and against what it declares before it is read
// (a zip bomb's entry expands past what it declares, or past 1000 times its compressed size),
// and config.json may nest 64 deep at most.
#pragma once
#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace keras {
class Model;

namespace saving {
// Writes `model` to `path` (ending in ".keras"). Collective when save_weights would be
// (saving/keras_weights_file.h): then process 0 writes and all learn whether it succeeded.
void save_model(Model& model, const std::string& path);
// What config.json may hold at most, in bytes, and how deep it may nest.
inline constexpr std::size_t kMaxConfigBytes = 64u << 20;
inline constexpr int kMaxConfigDepth = 64;
// config.json's text parsed with those limits (FileFormatError past them or on bad JSON).
// Exposed for the fuzzer of tests/fuzz.
nlohmann::json parse_config_text(const std::string& text, const char* entry = "config.json");
}  // namespace saving

// Keras' keras.saving.load_model: the model in a .keras archive, built and with its weights.
// With `compile`, a model saved compiled is compiled as it was when keras-cpp has its optimizer
// and loss (else a warning says why not, and the model is returned uncompiled, as Keras does),
// and the optimizer's state in the archive is loaded too. Under a distribution every process
// calls it and builds the model under the global distribution, reading only its own blocks.
std::shared_ptr<Model> load_model(const std::string& path, bool compile = true);

}  // namespace keras
