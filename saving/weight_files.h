// The weight files of save_weights and load_weights, picked by extension as Keras picks them:
// Keras' .weights.h5 (saving/keras_weights_file.h) and safetensors keyed by the same layout
// (saving/keras_weight_layout.h; files written before it, keyed by variable path, still load), and
// the checks made on a file's tensors before any variable changes, which BackupAndRestore makes
// on its backups too. A file that fails them leaves the model as it was.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace keras {

class Model;

namespace weight_files {

// Whether `path` names a weight file: save_weights, load_weights and ModelCheckpoint take
// ".weights.h5" (Keras' own) and ".safetensors".
bool has_weights_suffix(const std::string& path);
bool is_keras_weights_file(const std::string& path);
// Throws ValueError unless has_weights_suffix(path); `what` names the caller.
void check_file_name(const std::string& path, const char* what);

// save_weights and load_weights once the file name and the model are checked: full tensors
// whatever the distribution (saving/checkpoint_files.h).
void save(Model& model, const std::string& path);
void load(Model& model, const std::string& path);

// How a reader's errors speak of a file's tensors.
struct Wording {
  const char* caller;        // opens every message: "load_weights"
  const char* tensor_noun;   // before a tensor's quoted name: "weight " or nothing
  const char* missing_hint;  // after a missing tensor's message
  // A backup holds only float tensors it wrote itself: another dtype means a damaged file
  // (FileFormatError, which BackupAndRestore falls back from), not a user's mistake (DTypeError).
  bool wrong_dtype_is_damage;
};

// A weight file read for `model_name`, whose tensors are handed out only once checked.
class CheckedFile {
 public:
  // Reads `path` (io::load_safetensors, with its errors); its metadata into `*metadata` if given.
  CheckedFile(const std::string& path, std::string model_name, Wording wording,
              std::map<std::string, std::string>* metadata = nullptr);

  // The tensor `name`: throws ValueError when the file has none, ShapeError when its shape is
  // not `shape`, and for a dtype other than a float one the error of Wording.
  // `owner`, when given, names what needs the tensor in messages ("variable 'sequential/dense/kernel'").
  const Tensor& tensor(const std::string& name, const Shape& shape, const std::string& owner = "") const;
  std::size_t size() const { return tensors_.size(); }
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }

 private:
  std::string path_;
  std::string model_name_;
  Wording wording_;
  std::map<std::string, Tensor> tensors_;
};

}  // namespace weight_files
}  // namespace keras
