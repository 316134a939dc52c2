// BackupAndRestore: what a backup holds, how it is written and read back (see the header).
#include "layers/backup_and_restore.h"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <vector>

#include "distribution/runtime.h"
#include "engine/errors.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "io/safetensors.h"
#include "layers/checkpoint_files.h"
#include "layers/model.h"

namespace keras {
namespace {

constexpr const char* kFormat = "keras-cpp-backup";
constexpr const char* kFormatVersion = "1";

// Doubles as C99 hexadecimal floats: exact both ways.
std::string exact(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%a", value);
  return text;
}

template <typename T>
std::string join(const std::vector<T>& values) {
  std::string text;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) text += ",";
    if constexpr (std::is_same_v<T, double>) {
      text += exact(values[i]);
    } else {
      text += std::to_string(values[i]);
    }
  }
  return text;
}

// The model's layers with their paths, depth first (the model itself included).
void collect_layers(Layer& layer, std::vector<Layer*>& out) {
  out.push_back(&layer);
  for (const LayerPtr& sublayer : layer.layers()) collect_layers(*sublayer, out);
}

// Reads the metadata of one backup file, naming the file and key in every error.
class BackupMetadata {
 public:
  BackupMetadata(std::string path, std::map<std::string, std::string> values)
      : path_(std::move(path)), values_(std::move(values)) {}

  const std::string& text(const std::string& key) const {
    auto found = values_.find(key);
    if (found == values_.end()) {
      throw FileFormatError(str("BackupAndRestore: '", path_, "' has no '", key,
                                "' in its metadata; it is not a complete backup"));
    }
    return found->second;
  }
  std::int64_t integer(const std::string& key) const {
    const std::string& value = text(key);
    char* end = nullptr;
    long long parsed = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0') throw bad(key, value, "an integer");
    return parsed;
  }
  std::uint64_t unsigned_integer(const std::string& value, const std::string& key) const {
    char* end = nullptr;
    unsigned long long parsed = std::strtoull(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || value[0] == '-') {
      throw bad(key, value, "an unsigned integer");
    }
    return parsed;
  }
  double number(const std::string& value, const std::string& key) const {
    char* end = nullptr;
    double parsed = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0') throw bad(key, value, "a number");
    return parsed;
  }
  std::vector<std::string> list(const std::string& key) const {
    std::vector<std::string> items;
    std::stringstream stream(text(key));
    std::string item;
    while (std::getline(stream, item, ',')) items.push_back(item);
    return items;
  }
  const std::map<std::string, std::string>& all() const { return values_; }

 private:
  FileFormatError bad(const std::string& key, const std::string& value, const char* expected) const {
    return FileFormatError(str("BackupAndRestore: '", path_, "' has ", key, "='", value,
                               "'; expected ", expected));
  }
  std::string path_;
  std::map<std::string, std::string> values_;
};

// Whether `path` exists, agreed by every process: a backup some processes see and others do
// not would resume them at different places.
bool exists_everywhere(const std::string& path) {
  std::error_code error;
  const std::int64_t here = std::filesystem::exists(path, error) ? 1 : 0;
  distribution::Communicator& world = distribution::world();
  if (world.size() == 1) return here == 1;
  std::int64_t counts[2] = {here, -here};
  world.all_reduce(counts, 2, DType::int64, distribution::ReduceOperation::max);
  const bool any = counts[0] == 1, all = -counts[1] == 1;
  if (any != all) {
    throw ValueError(str("BackupAndRestore: '", path, "' exists for some processes and not for "
                         "others (this is process ", world.rank(), ", which ",
                         here ? "sees" : "does not see", " it); backup_dir must be a directory "
                         "every process sees, such as a shared filesystem"));
  }
  return any;
}

}  // namespace

BackupAndRestore::BackupAndRestore(std::string backup_dir)
    : BackupAndRestore(std::move(backup_dir), Options{}) {}

BackupAndRestore::BackupAndRestore(std::string backup_dir, Options options)
    : backup_dir_(std::move(backup_dir)), options_(std::move(options)) {
  if (backup_dir_.empty()) throw ValueError("BackupAndRestore: backup_dir must not be empty");
  if (const auto* every = std::get_if<std::int64_t>(&options_.save_freq)) {
    if (*every <= 0) {
      throw ValueError(str("BackupAndRestore: save_freq must be 'epoch' or a positive number of "
                           "batches, got ", *every));
    }
    save_every_batches_ = *every;
  } else if (std::get<std::string>(options_.save_freq) != "epoch") {
    throw ValueError(str("BackupAndRestore: save_freq must be 'epoch' or a positive number of "
                         "batches, got '", std::get<std::string>(options_.save_freq), "'"));
  }
}

std::string BackupAndRestore::latest_path() const {
  return (std::filesystem::path(backup_dir_) / "latest.safetensors").string();
}
std::string BackupAndRestore::previous_path() const {
  return (std::filesystem::path(backup_dir_) / "previous.safetensors").string();
}

void BackupAndRestore::on_train_begin(Model& model) {
  restored_ = false;
  restored_epoch_ = -1;
  restored_step_ = -1;
  batches_since_save_ = 0;
  if (!model.built()) {
    throw ValueError(str("BackupAndRestore: model '", model.name(), "' must be built before fit() "
                         "so that a backup can be loaded into it; build it by calling it on a "
                         "batch of data first, e.g. model.predict(x_sample)"));
  }
  const bool latest = exists_everywhere(latest_path());
  if (latest) {
    try {
      restore(model, latest_path());
      return;
    } catch (const FileFormatError& error) {
      if (!options_.double_checkpoint) throw;
      if (distribution::process_id() == 0) {
        std::fprintf(stderr, "warning: %s; trying the previous backup\n", error.what());
      }
    }
  }
  if (options_.double_checkpoint && exists_everywhere(previous_path())) {
    restore(model, previous_path());
  }
}

void BackupAndRestore::restore(Model& model, const std::string& path) {
  std::map<std::string, std::string> raw_metadata;
  auto loaded = io::load_safetensors(path, &raw_metadata);
  BackupMetadata metadata(path, raw_metadata);
  if (metadata.text("format") != kFormat || metadata.text("backup_version") != kFormatVersion) {
    throw FileFormatError(str("BackupAndRestore: '", path, "' is not a keras-cpp backup of version ",
                              kFormatVersion, " (format '", metadata.text("format"), "', version '",
                              metadata.text("backup_version"), "')"));
  }
  std::map<std::string, Tensor> tensors(loaded.begin(), loaded.end());
  optimizers::Optimizer& optimizer = model.optimizer();
  if (metadata.text("optimizer") != optimizer.name()) {
    throw ValueError(str("BackupAndRestore: '", path, "' was saved with optimizer ",
                         metadata.text("optimizer"), ", but model '", model.name(),
                         "' is compiled with ", optimizer.name()));
  }
  auto find = [&](const std::string& key, const Shape& shape) -> const Tensor& {
    auto found = tensors.find(key);
    if (found == tensors.end()) {
      throw ValueError(str("BackupAndRestore: '", path, "' has no '", key, "', which model '",
                           model.name(), "' needs; was it saved from another model?"));
    }
    if (found->second.shape() != shape) {
      throw ShapeError(str("BackupAndRestore: '", key, "' in '", path, "' has shape ",
                           shape_to_string(found->second.shape()), " but the model expects ",
                           shape_to_string(shape)));
    }
    return found->second;
  };
  // Check everything before changing anything, so a bad backup leaves the model as it was.
  std::vector<Variable*> variables = model.variables();
  std::size_t expected_tensors = variables.size();
  std::map<Variable*, std::int64_t> slot_counts;
  for (Variable* variable : variables) {
    find("weights/" + variable->path(), variable->global_shape());
    std::int64_t slots = metadata.integer("slots/" + variable->path());
    for (std::int64_t i = 0; i < slots; ++i) {
      find(str("optimizer/", variable->path(), "/", i), variable->global_shape());
    }
    slot_counts[variable] = slots;
    expected_tensors += static_cast<std::size_t>(slots);
  }
  if (tensors.size() != expected_tensors) {
    throw ValueError(str("BackupAndRestore: '", path, "' holds ", tensors.size(),
                         " tensors but model '", model.name(), "' has ", expected_tensors,
                         " (weights and optimizer slots); was it saved from another model?"));
  }
  std::vector<Layer*> layers;
  collect_layers(model, layers);
  std::map<Layer*, std::vector<std::uint64_t>> counters;
  std::map<std::string, Layer*> layers_by_path;
  for (Layer* layer : layers) layers_by_path[layer->path()] = layer;
  for (const auto& [key, value] : raw_metadata) {
    if (key.rfind("random/", 0) != 0) continue;
    auto layer = layers_by_path.find(key.substr(7));
    if (layer == layers_by_path.end()) {
      throw ValueError(str("BackupAndRestore: '", path, "' has random counters for layer '",
                           key.substr(7), "', which model '", model.name(), "' does not have"));
    }
    for (const std::string& item : metadata.list(key)) {
      counters[layer->second].push_back(metadata.unsigned_integer(item, key));
    }
  }
  for (Layer* layer : layers) {
    if (!layer->random_counters().empty() && !counters.count(layer)) {
      throw ValueError(str("BackupAndRestore: '", path, "' has no random counters for layer '",
                           layer->path(), "'; was it saved from another model?"));
    }
  }
  TrainingPosition position;
  position.epoch = static_cast<int>(metadata.integer("epoch"));
  position.step = metadata.integer("step");
  position.shuffle_state = metadata.text("shuffle_state");
  for (const std::string& item : metadata.list("totals")) {
    position.totals.push_back(metadata.number(item, "totals"));
  }
  const double learning_rate = metadata.number(metadata.text("learning_rate"), "learning_rate");
  const std::int64_t iterations = metadata.integer("optimizer_iterations");
  const std::uint64_t seed_state =
      metadata.unsigned_integer(metadata.text("random_seed_state"), "random_seed_state");

  NoGradGuard no_grad;
  for (Variable* variable : variables) {
    Tensor block = checkpoint::local_block(tensors["weights/" + variable->path()], variable->value);
    variable->value.assign(ops::cast(block, variable->value.dtype()));
    std::vector<Tensor> slots;
    for (std::int64_t i = 0; i < slot_counts[variable]; ++i) {
      Tensor slot = checkpoint::local_block(tensors[str("optimizer/", variable->path(), "/", i)],
                                            variable->value);
      slots.push_back(ops::cast(slot, variable->value.dtype()));
    }
    if (!slots.empty()) optimizer.set_slots(variable->value, slots);
  }
  optimizer.set_iterations(iterations);
  optimizer.set_learning_rate(learning_rate);
  for (Layer* layer : layers) {
    auto found = counters.find(layer);
    if (found != counters.end()) layer->set_random_counters(found->second);
  }
  set_random_seed(seed_state);
  restored_ = true;
  restored_epoch_ = position.epoch;
  restored_step_ = position.step;
  model.resume_training_from(std::move(position));
}

void BackupAndRestore::save(Model& model) {
  std::error_code error;
  std::filesystem::create_directories(backup_dir_, error);
  if (error && !std::filesystem::is_directory(backup_dir_)) {
    throw FileNotFoundError(str("BackupAndRestore: cannot create backup_dir '", backup_dir_,
                                "': ", error.message()));
  }
  optimizers::Optimizer& optimizer = model.optimizer();
  const TrainingPosition& position = model.training_position();
  std::map<std::string, std::string> metadata = {
      {"format", kFormat},
      {"backup_version", kFormatVersion},
      {"model", model.name()},
      {"epoch", std::to_string(position.epoch)},
      {"step", std::to_string(position.step)},
      {"shuffle_state", position.shuffle_state},
      {"totals", join(position.totals)},
      {"optimizer", optimizer.name()},
      {"optimizer_iterations", std::to_string(optimizer.iterations())},
      {"learning_rate", exact(optimizer.learning_rate())},
      {"random_seed_state", std::to_string(random_seed_state())},
  };
  std::vector<std::pair<std::string, Tensor>> tensors;
  {
    NoGradGuard no_grad;
    for (Variable* variable : model.variables()) {
      tensors.emplace_back("weights/" + variable->path(),
                           checkpoint::full_tensor(variable->value, variable->value));
      std::vector<Tensor> slots = optimizer.slots_of(variable->value);
      metadata["slots/" + variable->path()] = std::to_string(slots.size());
      for (std::size_t i = 0; i < slots.size(); ++i) {
        tensors.emplace_back(str("optimizer/", variable->path(), "/", i),
                             checkpoint::full_tensor(slots[i], variable->value));
      }
    }
  }
  std::vector<Layer*> layers;
  collect_layers(model, layers);
  for (Layer* layer : layers) {
    std::vector<std::uint64_t> counters = layer->random_counters();
    if (!counters.empty()) metadata["random/" + layer->path()] = join(counters);
  }
  if (options_.double_checkpoint && distribution::process_id() == 0) {
    std::filesystem::rename(latest_path(), previous_path(), error);  // none yet: nothing to keep
  }
  checkpoint::write_file(latest_path(), tensors, metadata,
                         /*collective=*/distribution::world().size() > 1, "BackupAndRestore");
  batches_since_save_ = 0;
}

void BackupAndRestore::on_train_batch_end(Model& model, std::int64_t, const Logs&) {
  if (save_every_batches_ == 0) return;
  if (++batches_since_save_ >= save_every_batches_) save(model);
}

void BackupAndRestore::on_epoch_end(Model& model, int, Logs&) {
  if (save_every_batches_ == 0) save(model);
}

void BackupAndRestore::on_train_end(Model&) {
  if (!options_.delete_checkpoint) return;
  if (distribution::process_id() == 0) {
    std::error_code error;
    std::filesystem::remove(latest_path(), error);
    std::filesystem::remove(previous_path(), error);
    std::filesystem::remove(backup_dir_, error);  // only when empty: it may hold other files
  }
}

}  // namespace keras
