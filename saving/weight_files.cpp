// Weight files: the checks on a file's name and tensors, and save_weights / load_weights.
#include "saving/weight_files.h"

#include <utility>

#include "distribution/sharding/sharded_tensor.h"
#include "engine/errors.h"
#include "io/safetensors.h"
#include "saving/checkpoint_files.h"
#include "training/model.h"

namespace keras::weight_files {
namespace {

constexpr Wording kLoadWeights = {.caller = "load_weights", .tensor_noun = "weight ",
                                  .missing_hint = "", .wrong_dtype_is_damage = false};

}  // namespace

bool has_weights_suffix(const std::string& path) { return path.ends_with(".safetensors"); }

void check_file_name(const std::string& path, const char* what) {
  if (!has_weights_suffix(path)) {
    throw ValueError(str(what, ": the file name must end in '.safetensors', got '", path, "'"));
  }
}

CheckedFile::CheckedFile(const std::string& path, std::string model_name, Wording wording,
                         std::map<std::string, std::string>* metadata)
    : path_(path), model_name_(std::move(model_name)), wording_(wording) {
  auto loaded = io::load_safetensors(path, metadata);
  tensors_ = std::map<std::string, Tensor>(loaded.begin(), loaded.end());
}

const Tensor& CheckedFile::tensor(const std::string& name, const Shape& shape) const {
  auto found = tensors_.find(name);
  if (found == tensors_.end()) {
    throw ValueError(str(wording_.caller, ": '", path_, "' has no ", wording_.tensor_noun, "'",
                         name, "', which model '", model_name_, "' needs", wording_.missing_hint));
  }
  const Tensor& tensor = found->second;
  if (tensor.shape() != shape) {
    throw ShapeError(str(wording_.caller, ": ", wording_.tensor_noun, "'", name, "' in '", path_,
                         "' has shape ", shape_to_string(tensor.shape()),
                         " but the model expects ", shape_to_string(shape)));
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
    for (Variable* variable : model.variables()) {
      gathered = gathered || distribution::sharding_of(variable->value).has_value();
      tensors.emplace_back(variable->path(),
                           checkpoint::full_tensor(variable->value, variable->value));
    }
  }
  checkpoint::write_file(path, tensors, {{"format", "keras-cpp"}, {"model", model.name()}},
                         gathered, "save_weights");
}

void load(Model& model, const std::string& path) {
  CheckedFile file(path, model.name(), kLoadWeights);
  std::vector<Variable*> model_variables = model.variables();
  // Check everything before changing anything, so a bad file leaves the model as it was.
  for (Variable* variable : model_variables) {
    file.tensor(variable->path(), variable->global_shape());
  }
  if (file.size() != model_variables.size()) {
    for (const auto& [key, value] : file.tensors()) {
      bool used = false;
      for (Variable* variable : model_variables) used = used || variable->path() == key;
      if (!used) {
        throw ValueError(str("load_weights: '", path, "' has weight '", key, "', which model '",
                             model.name(), "' does not have"));
      }
    }
  }
  NoGradGuard no_grad;
  for (Variable* variable : model_variables) {
    // A sharded variable keeps its own block of the full tensor in the file.
    variable->value.assign(
        checkpoint::local_block(file.tensors().at(variable->path()), variable->value));
  }
}

}  // namespace keras::weight_files
