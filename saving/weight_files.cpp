// Weight files: the checks on a file's name and tensors, and save_weights / load_weights.
#include "saving/weight_files.h"

#include <utility>

#include "distribution/sharding/sharded_tensor.h"
#include "engine/errors.h"
#include "io/safetensors.h"
#include "saving/checkpoint_files.h"
#include "saving/keras_weight_layout.h"
#include "saving/keras_weights_file.h"
#include "training/model.h"

namespace keras::weight_files {
namespace {

// The "layout" metadata of safetensors weight files keyed as Keras' weight files are.
constexpr const char* kKerasLayout = "keras-weights-h5";

constexpr Wording kLoadWeights = {.caller = "load_weights", .tensor_noun = "weight ",
                                  .missing_hint = "", .wrong_dtype_is_damage = false};

}  // namespace

bool is_keras_weights_file(const std::string& path) { return path.ends_with(".weights.h5"); }

bool has_weights_suffix(const std::string& path) {
  return is_keras_weights_file(path) || path.ends_with(".safetensors");
}

void check_file_name(const std::string& path, const char* what) {
  if (!has_weights_suffix(path)) {
    throw ValueError(str(what, ": the file name must end in '.weights.h5' (Keras' format) or ",
                         "'.safetensors', got '", path, "'"));
  }
}

CheckedFile::CheckedFile(const std::string& path, std::string model_name, Wording wording,
                         std::map<std::string, std::string>* metadata)
    : path_(path), model_name_(std::move(model_name)), wording_(wording) {
  auto loaded = io::load_safetensors(path, metadata);
  tensors_ = std::map<std::string, Tensor>(loaded.begin(), loaded.end());
}

const Tensor& CheckedFile::tensor(const std::string& name, const Shape& shape,
                                  const std::string& owner) const {
  std::string for_owner = owner.empty() ? "" : str(" (for ", owner, ")");
  auto found = tensors_.find(name);
  if (found == tensors_.end()) {
    throw ValueError(str(wording_.caller, ": '", path_, "' has no ", wording_.tensor_noun, "'",
                         name, "', which model '", model_name_, "' needs", for_owner,
                         wording_.missing_hint));
  }
  const Tensor& tensor = found->second;
  if (tensor.shape() != shape) {
    throw ShapeError(str(wording_.caller, ": ", wording_.tensor_noun, "'", name, "' in '", path_,
                         "' has shape ", shape_to_string(tensor.shape()),
                         " but the model expects ", shape_to_string(shape), for_owner));
  }
  if (!is_floating(tensor.dtype())) {
    std::string message = str(wording_.caller, ": ", wording_.tensor_noun, "'", name, "' in '",
                              path_, "' is ", dtype_name(tensor.dtype()),
                              "; expected a float dtype");
    if (wording_.wrong_dtype_is_damage) throw FileFormatError(message);
    throw DTypeError(message);
  }
  return tensor;
}

void save(Model& model, const std::string& path) {
  if (is_keras_weights_file(path)) {
    saving::save_keras_weights(model, path);
    return;
  }
  // Full tensors, whatever the distribution. A replicated model is written by whichever
  // process calls this (each write is a private temporary renamed over the target, so several
  // processes writing the same bytes is safe, and one alone — the usual `if chief` — is too).
  // A sharded model is gathered, which every process must take part in; then process 0 writes
  // and the others learn whether it succeeded, so no process goes on to load a file that is
  // not there.
  std::vector<std::pair<std::string, Tensor>> tensors;
  bool gathered = false;
  {
    NoGradGuard no_grad;
    // Keyed by Keras' layout (layers/dense/vars/0), not by variable paths: a second instance
    // of the model (dense_2 where this one has dense) reads the file.
    for (const saving::WeightGroup& group : saving::keras_weight_groups(model)) {
      for (std::size_t index = 0; index < group.variables.size(); ++index) {
        const Tensor& value = group.variables[index]->value;
        gathered = gathered || distribution::sharding_of(value).has_value();
        tensors.emplace_back(group.key(index), checkpoint::full_tensor(value, value));
      }
    }
  }
  checkpoint::write_file(path, tensors,
                         {{"format", "keras-cpp"}, {"model", model.name()}, {"layout", kKerasLayout}},
                         gathered, "save_weights");
}

void load(Model& model, const std::string& path) {
  if (is_keras_weights_file(path)) {
    saving::load_keras_weights(model, path);
    return;
  }
  std::map<std::string, std::string> metadata;
  CheckedFile file(path, model.name(), kLoadWeights, &metadata);
  // Files of this layout name each weight by its place in the model; older files (no
  // "layout") by the variable's path, which only the instance that wrote them has.
  std::vector<std::pair<std::string, Variable*>> keyed;
  if (metadata.count("layout") && metadata.at("layout") == kKerasLayout) {
    for (const saving::WeightGroup& group : saving::keras_weight_groups(model)) {
      for (std::size_t index = 0; index < group.variables.size(); ++index) {
        keyed.emplace_back(group.key(index), group.variables[index]);
      }
    }
  } else {
    for (Variable* variable : model.variables()) keyed.emplace_back(variable->path(), variable);
  }
  // Check everything before changing anything, so a bad file leaves the model as it was.
  for (const auto& [key, variable] : keyed) {
    file.tensor(key, variable->global_shape(), str("variable '", variable->path(), "'"));
  }
  if (file.size() != keyed.size()) {
    for (const auto& [name, value] : file.tensors()) {
      bool used = false;
      for (const auto& [key, variable] : keyed) used = used || key == name;
      if (!used) {
        throw ValueError(str("load_weights: '", path, "' has weight '", name, "', which model '",
                             model.name(), "' does not have; is the file of another model?"));
      }
    }
  }
  NoGradGuard no_grad;
  for (const auto& [key, variable] : keyed) {
    // A sharded variable keeps its own block of the full tensor in the file.
    variable->value.assign(checkpoint::local_block(file.tensors().at(key), variable->value));
  }
}

}  // namespace keras::weight_files
