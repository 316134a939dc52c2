// libFuzzer harness for the reader of a .keras archive's config.json: the input is the
// file's text. It is parsed with load_model's limits (size, depth), made into a model
// (layers from their configs, a Sequential or a functional graph) under load_model's memory
// budget, and, when that succeeds, written back as a config and made again: both models must
// have the same layers with the same configs. A keras::Error is the expected outcome of a bad
// config; any other exception escapes and crashes the harness.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/allocator.h"
#include "engine/errors.h"
#include "fuzz_util.h"
#include "keras.h"
#include "saving/keras_archive.h"
#include "saving/model_config.h"

namespace {

std::string layer_configs(const keras::Model& model) {
  std::string text;
  for (const keras::LayerPtr& layer : model.layers()) text += layer->get_config().dump() + "\n";
  return text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  keras::set_num_threads(1);
  keras::clear_session();
  std::string text(reinterpret_cast<const char*>(data), size);
  std::shared_ptr<keras::Model> model;
  nlohmann::json config;
  try {
    keras::AllocationBudget budget(64u << 20, "config fuzzer");
    config = keras::saving::parse_config_text(text);
    model = keras::saving::model_from_config(config);
  } catch (const keras::Error&) {
    return 0;
  }
  std::string first = layer_configs(*model);
  std::shared_ptr<keras::Model> again;
  try {
    keras::AllocationBudget budget(64u << 20, "config fuzzer");
    again = keras::saving::model_from_config(keras::saving::model_config(*model));
  } catch (const keras::Error& error) {
    keras::fuzz::fail(std::string("a model made from a config could not be made again from its own config: ") +
                      error.what());
  }
  if (layer_configs(*again) != first) keras::fuzz::fail("the config changed on its way through a model");
  return 0;
}
