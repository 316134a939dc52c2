// BackupAndRestore: what a backup holds, how it is written and read back (see the header).
#include "training/backup_and_restore.h"

#include <cinttypes>
#include <cmath>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <limits>
#include <optional>
#include <map>
#include <sstream>
#include <vector>

#include "distribution/runtime/runtime.h"
#include "distribution/runtime/shared_outcome.h"
#include "engine/errors.h"
#include "engine/random.h"
#include "saving/checkpoint_files.h"
#include "training/model.h"
#include "saving/weight_files.h"

namespace keras {
namespace {

constexpr const char* kFormat = "keras-cpp-backup";
constexpr const char* kFormatVersion = "1";
// A backup's tensors are checked as load_weights checks a weight file's, in its own words.
constexpr weight_files::Wording kBackupWording = {
    .caller = "BackupAndRestore", .tensor_noun = "",
    .missing_hint = "; was it saved from another model?", .wrong_dtype_is_damage = true};

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
  if (!distribution::processes_train_together()) return here == 1;
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

namespace {

// A backup read and checked against the model and the fit() call, not yet applied.
struct Backup {
  std::map<std::string, Tensor> tensors;
  std::map<Variable*, std::int64_t> slot_counts;
  std::map<Layer*, std::vector<std::uint64_t>> counters;
  TrainingPosition position;
  double learning_rate = 0.0;
  std::int64_t iterations = 0;
  std::int64_t calls = -1;  // the optimizer's calls (-1: a backup from before they were saved)
  bool drop_sums = false;   // saved under other gradient_accumulation_steps: the sums are not restored
  // LossScaleOptimizer's scale and its finite steps in a row (when the optimizer scales).
  std::optional<double> loss_scale;
  std::int64_t loss_scale_steps = 0;
  std::uint64_t seed_state = 0;
};

// The names of the optimizer's state outside a variable's slots in a backup.
std::string accumulated_key(const Variable& variable) { return "optimizer_accumulated/" + variable.path(); }
std::string average_key(const Variable& variable) { return "optimizer_average/" + variable.path(); }

// Reads `path` and checks everything in it against `model` and the fit() call now starting;
// throws FileFormatError for a file that is not a complete backup, ValueError or ShapeError
// for one of another model or another run. Changes nothing.
Backup read_backup(Model& model, const std::string& path) {
  std::map<std::string, std::string> raw_metadata;
  weight_files::CheckedFile file(path, model.name(), kBackupWording, &raw_metadata);
  BackupMetadata metadata(path, raw_metadata);
  if (metadata.text("format") != kFormat || metadata.text("backup_version") != kFormatVersion) {
    throw FileFormatError(str("BackupAndRestore: '", path, "' is not a keras-cpp backup of version ",
                              kFormatVersion, " (format '", metadata.text("format"), "', version '",
                              metadata.text("backup_version"), "')"));
  }
  Backup backup;
  backup.tensors = file.tensors();
  optimizers::Optimizer& optimizer = model.optimizer();
  if (metadata.text("optimizer") != optimizer.name()) {
    throw ValueError(str("BackupAndRestore: '", path, "' was saved with optimizer ",
                         metadata.text("optimizer"), ", but model '", model.name(),
                         "' is compiled with ", optimizer.name()));
  }
  // A loss-scaled run resumes with the scale it had reached, or the first steps after resuming
  // would overflow (or underflow) again on their way to it.
  const bool saved_scaling = raw_metadata.count("loss_scale") > 0;
  if (saved_scaling != optimizer.scales_loss()) {
    throw ValueError(str("BackupAndRestore: '", path, "' was saved ", saved_scaling ? "with" : "without",
                         " loss scaling (LossScaleOptimizer), but the optimizer ", optimizer.name(), " of model '",
                         model.name(), "' ", optimizer.scales_loss() ? "scales its loss" : "does not scale its loss"));
  }
  if (saved_scaling) {
    backup.loss_scale = metadata.number(metadata.text("loss_scale"), "loss_scale");
    backup.loss_scale_steps = metadata.integer("loss_scale_steps");
    if (!std::isfinite(*backup.loss_scale) || *backup.loss_scale <= 0 || backup.loss_scale_steps < 0) {
      throw FileFormatError(str("BackupAndRestore: '", path, "' has loss_scale=", *backup.loss_scale,
                                " and loss_scale_steps=", backup.loss_scale_steps,
                                "; expected a finite scale > 0 and a count >= 0"));
    }
  }
  std::vector<Variable*> variables = model.variables();
  std::size_t expected_tensors = variables.size();
  for (Variable* variable : variables) {
    file.tensor("weights/" + variable->path(), variable->global_shape());
    std::int64_t slots = metadata.integer("slots/" + variable->path());
    if (slots < 0 || slots > 8) {
      throw FileFormatError(str("BackupAndRestore: '", path, "' gives '", variable->path(), "' ",
                                slots, " optimizer slots; expected 0 to 8"));
    }
    for (std::int64_t i = 0; i < slots; ++i) {
      file.tensor(str("optimizer/", variable->path(), "/", i), variable->global_shape());
    }
    backup.slot_counts[variable] = slots;
    expected_tensors += static_cast<std::size_t>(slots);
    // A gradient sum in progress and a moving average, where the optimizer keeps them.
    for (const std::string& key : {accumulated_key(*variable), average_key(*variable)}) {
      if (file.tensors().count(key) == 0) continue;
      file.tensor(key, variable->global_shape());
      ++expected_tensors;
    }
  }
  if (file.size() != expected_tensors) {
    throw ValueError(str("BackupAndRestore: '", path, "' holds ", file.size(),
                         " tensors but model '", model.name(), "' has ", expected_tensors,
                         " (weights, optimizer slots, gradient sums and averages); was it saved from another model?"));
  }
  std::vector<Layer*> layers;
  collect_layers(model, layers);
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
      backup.counters[layer->second].push_back(metadata.unsigned_integer(item, key));
    }
  }
  for (Layer* layer : layers) {
    auto found = backup.counters.find(layer);
    const std::size_t expected = layer->random_counters().size();
    const std::size_t given = found == backup.counters.end() ? 0 : found->second.size();
    if (given != expected) {
      throw ValueError(str("BackupAndRestore: '", path, "' has ", given, " random counter(s) for ",
                           "layer '", layer->path(), "', which keeps ", expected,
                           "; was it saved from another model?"));
    }
  }
  TrainingPosition& position = backup.position;
  const std::int64_t epoch = metadata.integer("epoch");
  if (epoch < 0 || epoch > std::numeric_limits<int>::max()) {
    throw FileFormatError(str("BackupAndRestore: '", path, "' has epoch=", epoch));
  }
  position.epoch = static_cast<int>(epoch);
  position.step = metadata.integer("step");
  position.shuffle_state = metadata.text("shuffle_state");
  for (const std::string& item : metadata.list("totals")) {
    position.totals.push_back(metadata.number(item, "totals"));
  }
  position.epoch_learning_rate =
      metadata.number(metadata.text("epoch_learning_rate"), "epoch_learning_rate");
  position.samples = metadata.integer("samples");
  position.batch_size = metadata.integer("batch_size");
  backup.learning_rate = metadata.number(metadata.text("learning_rate"), "learning_rate");
  if (!std::isfinite(backup.learning_rate) || backup.learning_rate < 0) {
    throw FileFormatError(str("BackupAndRestore: '", path, "' has learning_rate=",
                              backup.learning_rate, "; expected a finite number >= 0"));
  }
  backup.iterations = metadata.integer("optimizer_iterations");
  if (backup.iterations < 0) {
    throw FileFormatError(str("BackupAndRestore: '", path, "' has optimizer_iterations=",
                              backup.iterations));
  }
  if (raw_metadata.count("optimizer_calls")) {
    backup.calls = metadata.integer("optimizer_calls");
    if (backup.calls < 0) {
      throw FileFormatError(str("BackupAndRestore: '", path, "' has optimizer_calls=", backup.calls));
    }
    // The calls and the sums in progress place the run inside an accumulation cycle of the
    // steps it was saved with; under other steps they mean nothing, and the run resumes from
    // the updates made (optimizer_iterations), without them.
    const std::int64_t saved_steps = std::max<std::int64_t>(metadata.integer("optimizer_accumulation_steps"), 1);
    const std::int64_t steps = std::max(optimizer.gradient_accumulation_steps(), 1);
    if (saved_steps != steps) {
      std::fprintf(stderr,
                   "BackupAndRestore: '%s' was saved with gradient_accumulation_steps=%lld and the optimizer now has "
                   "%lld: resuming from its %lld updates without the gradients summed since the last one\n",
                   path.c_str(), static_cast<long long>(saved_steps), static_cast<long long>(steps),
                   static_cast<long long>(backup.iterations));
      backup.calls = -1;
      backup.drop_sums = true;
    }
  }
  backup.seed_state =
      metadata.unsigned_integer(metadata.text("random_seed_state"), "random_seed_state");
  check_resumable(position, model.training_position(), model.log_totals_size());
  return backup;
}

void apply_backup(Model& model, Backup& backup) {
  optimizers::Optimizer& optimizer = model.optimizer();
  NoGradGuard no_grad;
  for (auto& [variable, count] : backup.slot_counts) {
    variable->value.assign(
        checkpoint::local_block(backup.tensors.at("weights/" + variable->path()), variable->value));
    std::vector<Tensor> slots;
    for (std::int64_t i = 0; i < count; ++i) {
      slots.push_back(checkpoint::local_block(
          backup.tensors.at(str("optimizer/", variable->path(), "/", i)), variable->value));
    }
    optimizer.set_slots(variable->value, slots);  // none: as before its first update
    optimizers::Optimizer::OutsideSlots outside;
    if (auto found = backup.tensors.find(accumulated_key(*variable));
        found != backup.tensors.end() && !backup.drop_sums) {
      outside.accumulated = checkpoint::local_block(found->second, variable->value);
    }
    if (auto found = backup.tensors.find(average_key(*variable)); found != backup.tensors.end()) {
      outside.average = checkpoint::local_block(found->second, variable->value);
    }
    optimizer.set_outside_slots(variable->value, outside);
  }
  optimizer.set_iterations(backup.iterations);
  if (backup.calls >= 0) optimizer.set_calls(backup.calls);
  if (backup.loss_scale) optimizer.set_loss_scale_state(*backup.loss_scale, backup.loss_scale_steps);
  // A schedule sets the rate from the restored step count itself.
  if (!optimizer.learning_rate_schedule()) optimizer.set_learning_rate(backup.learning_rate);
  for (auto& [layer, counters] : backup.counters) layer->set_random_counters(counters);
  set_random_seed(backup.seed_state);
  model.resume_training_from(backup.position);
}

}  // namespace

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
  std::vector<std::string> candidates = {latest_path()};
  if (options_.double_checkpoint) candidates.push_back(previous_path());
  for (const std::string& path : candidates) {
    if (!exists_everywhere(path)) continue;
    // Every process reads and checks; only when all succeeded does any change its model, so
    // the processes never resume from different places.
    std::optional<Backup> backup;
    std::exception_ptr failure;
    bool unreadable = false;
    try {
      backup = read_backup(model, path);
    } catch (const FileFormatError&) {
      failure = std::current_exception();
      unreadable = true;
    } catch (const std::exception&) {
      failure = std::current_exception();
    }
    distribution::Communicator& world = distribution::world();
    // Any failed; any found the file unreadable; any failed otherwise (another model or run).
    std::int64_t outcome[3] = {failure ? 1 : 0, unreadable ? 1 : 0, failure && !unreadable ? 1 : 0};
    if (distribution::processes_train_together()) {
      world.all_reduce(outcome, 3, DType::int64, distribution::ReduceOperation::max);
    }
    if (outcome[0] == 0) {
      apply_backup(model, *backup);
      restored_ = true;
      restored_epoch_ = backup->position.epoch;
      restored_step_ = backup->position.step;
      return;
    }
    // A torn or corrupt latest backup (only that: another model's backup is an error) falls
    // back to the previous one when there is one.
    const bool only_unreadable = outcome[1] == 1 && outcome[2] == 0;  // the same on every process
    if (path == latest_path() && options_.double_checkpoint && only_unreadable) {
      if (distribution::process_id() == 0) {
        std::string reason = "it cannot be read";
        if (failure) {
          try {
            std::rethrow_exception(failure);
          } catch (const std::exception& error) {
            reason = error.what();
          }
        }
        std::fprintf(stderr, "warning: BackupAndRestore: the latest backup is unusable (%s); "
                             "trying the previous one\n", reason.c_str());
      }
      continue;
    }
    if (failure) std::rethrow_exception(failure);
    throw Error(str("BackupAndRestore: reading '", path, "' failed on another process (its "
                    "message says why); process ", world.rank(), " stops with it"));
  }
}

void BackupAndRestore::save(Model& model) {
  // Process 0 writes (checkpoint::write_file), so it makes the folder; the others learn whether
  // it could before they gather tensors for it.
  const bool together = distribution::processes_train_together();
  const bool writer = !together || distribution::process_id() == 0;
  std::error_code error;
  std::exception_ptr failure;
  if (writer) {
    std::filesystem::create_directories(backup_dir_, error);
    if (error && !std::filesystem::is_directory(backup_dir_)) {
      failure = std::make_exception_ptr(FileNotFoundError(
          str("BackupAndRestore: cannot create backup_dir '", backup_dir_, "': ", error.message())));
    }
  }
  distribution::agree_on_failure(failure, str("BackupAndRestore: creating '", backup_dir_, "'"));
  if (together) model.gather_optimizer_state();
  optimizers::Optimizer& optimizer = model.optimizer();
  const TrainingPosition& position = model.training_position();
  std::map<std::string, std::string> metadata = {
      {"epoch_learning_rate", exact(position.epoch_learning_rate)},
      {"samples", std::to_string(position.samples)},
      {"batch_size", std::to_string(position.batch_size)},
      {"format", kFormat},
      {"backup_version", kFormatVersion},
      {"model", model.name()},
      {"epoch", std::to_string(position.epoch)},
      {"step", std::to_string(position.step)},
      {"shuffle_state", position.shuffle_state},
      {"totals", join(position.totals)},
      {"optimizer", optimizer.name()},
      {"optimizer_iterations", std::to_string(optimizer.iterations())},
      {"optimizer_calls", std::to_string(optimizer.calls())},
      {"optimizer_accumulation_steps", std::to_string(optimizer.gradient_accumulation_steps())},
      {"learning_rate", exact(optimizer.learning_rate())},
      {"random_seed_state", std::to_string(random_seed_state())},
  };
  if (optimizer.scales_loss()) {
    metadata["loss_scale"] = exact(optimizer.loss_scale());
    metadata["loss_scale_steps"] = std::to_string(optimizer.finite_steps_in_a_row());
  }
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
      const optimizers::Optimizer::OutsideSlots outside = optimizer.outside_slots_of(variable->value);
      if (outside.accumulated.defined()) {
        tensors.emplace_back(accumulated_key(*variable), checkpoint::full_tensor(outside.accumulated, variable->value));
      }
      if (outside.average.defined()) {
        tensors.emplace_back(average_key(*variable), checkpoint::full_tensor(outside.average, variable->value));
      }
    }
  }
  std::vector<Layer*> layers;
  collect_layers(model, layers);
  for (Layer* layer : layers) {
    std::vector<std::uint64_t> counters = layer->random_counters();
    if (!counters.empty()) metadata["random/" + layer->path()] = join(counters);
  }
  if (options_.double_checkpoint && writer) {
    std::filesystem::rename(latest_path(), previous_path(), error);  // none yet: nothing to keep
  }
  checkpoint::write_file(latest_path(), tensors, metadata,
                         /*collective=*/together, "BackupAndRestore");
  batches_since_save_ = 0;
}

void BackupAndRestore::on_train_batch_end(Model& model, std::int64_t, const Logs&) {
  if (save_every_batches_ == 0) return;
  if (++batches_since_save_ >= save_every_batches_) save(model);
}

bool BackupAndRestore::needs_batch_logs(std::int64_t) const {
  return save_every_batches_ > 0 && batches_since_save_ + 1 >= save_every_batches_;
}

void BackupAndRestore::on_epoch_end(Model& model, int, Logs&) {
  if (save_every_batches_ == 0) save(model);
}

void BackupAndRestore::on_train_end(Model&) {
  if (!options_.delete_checkpoint) return;
  const bool together = distribution::processes_train_together();
  if (!together || distribution::process_id() == 0) {
    std::error_code error;
    std::filesystem::remove(latest_path(), error);
    std::filesystem::remove(previous_path(), error);
    std::filesystem::remove(backup_dir_, error);  // only when empty: it may hold other files
  }
  // Before any process looks for a backup again (a next fit() on the same folder).
  if (together) distribution::world().barrier();
}

}  // namespace keras
