// Keras' .weights.h5: writing a model's groups and datasets, and reading them back by block.
#include "saving/keras_weights_file.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "distribution/api/distribution.h"
#include "distribution/runtime/runtime.h"
#include "distribution/runtime/shared_outcome.h"
#include "distribution/sharding/sharded_tensor.h"
#include "engine/errors.h"
#include "engine/ops.h"
#include "engine/optimizers.h"
#include "io/atomic_file.h"
#include "io/hdf5_file.h"
#include "saving/checkpoint_files.h"
#include "saving/keras_weight_layout.h"
#include "training/model.h"

namespace keras::saving {
namespace {

using io::hdf5::Group;
using Kind = OptimizerEntry::Kind;

// Groups made on demand by path ("layers/dense/vars"), each once.
class GroupTree {
 public:
  explicit GroupTree(Group root) { groups_.emplace("", std::move(root)); }
  Group& at(const std::string& path) {
    if (auto found = groups_.find(path); found != groups_.end()) return found->second;
    std::size_t slash = path.rfind('/');
    Group& parent = at(slash == std::string::npos ? "" : path.substr(0, slash));
    Group created = parent.create_group(slash == std::string::npos ? path : path.substr(slash + 1));
    return groups_.emplace(path, std::move(created)).first->second;
  }
  void clear() { groups_.clear(); }

 private:
  std::map<std::string, Group> groups_;
};

// The tensor of `variable`'s slot, state or value that `entry` names; undefined when the
// optimizer holds none (then nothing is written for it).
Tensor optimizer_tensor(const optimizers::Optimizer& optimizer, const OptimizerEntry& entry) {
  const Tensor& variable = entry.variable->value;
  switch (entry.kind) {
    case Kind::average: return optimizer.outside_slots_of(variable).average;
    case Kind::accumulated: return optimizer.outside_slots_of(variable).accumulated;
    case Kind::slot: {
      std::vector<Tensor> slots = optimizer.slots_of(variable);
      return entry.slot < static_cast<int>(slots.size()) ? slots[entry.slot] : Tensor();
    }
    default: return Tensor();
  }
}

// LossScaleOptimizer's own variables, before the inner optimizer's.
bool is_loss_scale_optimizers_own(Kind kind) {
  return kind == Kind::loss_scale_optimizer_iterations || kind == Kind::loss_scale_optimizer_learning_rate ||
         kind == Kind::loss_scale_step_counter || kind == Kind::loss_scale;
}

// The entries that are one number of the optimizer's, not a tensor per variable.
bool is_scalar(Kind kind) {
  return kind != Kind::average && kind != Kind::accumulated && kind != Kind::slot;
}

const char* scalar_name(Kind kind) {
  switch (kind) {
    case Kind::loss_scale_optimizer_iterations: return "LossScaleOptimizer's own iteration";
    case Kind::loss_scale_optimizer_learning_rate: return "LossScaleOptimizer's own learning_rate";
    case Kind::loss_scale_step_counter: return "step_counter (finite steps in a row)";
    case Kind::loss_scale: return "dynamic_scale (the loss scale)";
    case Kind::iterations: return "iterations";
    case Kind::learning_rate: return "learning_rate";
    case Kind::average:
    case Kind::accumulated:
    case Kind::slot: break;
  }
  throw Error("internal: scalar_name of a per-variable optimizer entry");
}

// The number an entry that is_scalar writes, with the dtype Keras gives it.
Tensor optimizer_scalar(const optimizers::Optimizer& optimizer, Kind kind) {
  switch (kind) {
    case Kind::loss_scale_optimizer_iterations: return Tensor::scalar(0.0, int64);
    case Kind::loss_scale_optimizer_learning_rate: return Tensor::scalar(0.0, float32);
    case Kind::loss_scale_step_counter:
      return Tensor::scalar(static_cast<double>(optimizer.finite_steps_in_a_row()), int64);
    case Kind::loss_scale: return Tensor::scalar(optimizer.loss_scale(), float32);
    // Keras' _iterations counts every apply() call; its iterations property divides by
    // gradient_accumulation_steps. The file holds the calls.
    case Kind::iterations: return Tensor::scalar(static_cast<double>(optimizer.calls()), int64);
    case Kind::learning_rate: return Tensor::scalar(optimizer.learning_rate(), float32);
    case Kind::average:
    case Kind::accumulated:
    case Kind::slot: break;
  }
  throw Error("internal: optimizer_scalar of a per-variable optimizer entry");
}

// Whether the optimizer has made its per-variable state (Keras: whether it is built).
bool optimizer_has_state(const optimizers::Optimizer& optimizer, const std::vector<Variable*>& trainable) {
  for (Variable* variable : trainable) {
    if (!optimizer.slots_of(variable->value).empty()) return true;
    auto outside = optimizer.outside_slots_of(variable->value);
    if (outside.average.defined() || outside.accumulated.defined()) return true;
  }
  return false;
}

Tensor zeros_like(const Tensor& variable) {
  return Tensor::zeros(variable.shape(), variable.dtype(), variable.device());
}

// Keras' default optimizer names are lower case ("adam", "sgd").
std::string keras_optimizer_name(const std::string& name) {
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

std::vector<Variable*> trainable_variables(Model& model) { return keras_trainable_variables(model); }

std::string where(const WeightGroup& group) {
  return group.path.empty() ? std::string("the model itself") : str("'", group.path, "'");
}

// This process's block of `variable` as starts and sizes (both empty: the whole of it).
std::pair<Shape, Shape> block_of(const Tensor& variable) {
  std::optional<distribution::Sharding> sharding = distribution::sharding_of(variable);
  if (!sharding) return {};
  return sharding->block(distribution::process_coordinates(*sharding->mesh()));
}

// A dataset checked against the shape the model expects, then read by block and cast.
Tensor read_checked(const Group& vars, const std::string& index, const Shape& expected,
                    const Tensor& like, const std::string& path, const std::string& what) {
  io::hdf5::DatasetInfo info = vars.dataset_info(index);
  if (info.shape != expected) {
    throw ShapeError(str("load_weights: '", vars.path(), "/", index, "' in '", path, "' has shape ",
                         shape_to_string(info.shape), " but ", what, " has shape ",
                         shape_to_string(expected)));
  }
  if (!info.floating && is_floating(like.dtype())) {
    throw DTypeError(str("load_weights: '", vars.path(), "/", index, "' in '", path,
                         "' holds integers; ", what, " is ", dtype_name(like.dtype())));
  }
  auto [starts, sizes] = block_of(like);
  // Read in the variable's own dtype where HDF5 converts to it (float64 keeps its precision,
  // integers their range), else as float32 and cast.
  DType read_as = like.dtype() == float64 || like.dtype() == int64 || like.dtype() == int32 ? like.dtype() : float32;
  Tensor block = vars.read_dataset(index, read_as, starts, sizes);
  return block.dtype() == like.dtype() ? block : ops::cast(block, like.dtype());
}

}  // namespace

WeightsWritten save_keras_weights(Model& model, const std::string& path) {
  std::vector<WeightGroup> groups = keras_weight_groups(model);
  bool sharded = false;
  for (const WeightGroup& group : groups) {
    for (Variable* variable : group.variables) sharded = sharded || variable->sharded();
  }
  bool with_optimizer = model.compiled();
  bool gathered = sharded || (with_optimizer && model.optimizer_state_held_by_blocks());
  if (with_optimizer) model.gather_optimizer_state();  // a collective only when held by blocks
  distribution::Communicator& world = distribution::world();
  bool writes = !gathered || world.size() == 1 || world.rank() == 0;

  // The writer keeps taking part in every gather after a failure of its own, so no process
  // is left waiting in one; the failure is shared at the end.
  std::exception_ptr failure;
  std::optional<io::AtomicFile> temporary;
  std::optional<io::hdf5::File> file;
  std::optional<GroupTree> tree;
  auto attempt = [&](auto&& step) {
    if (!writes || failure) return;
    try {
      step();
    } catch (...) {
      failure = std::current_exception();
    }
  };
  attempt([&] {
    temporary.emplace(path, "save_weights");
    file.emplace(io::hdf5::File::create(temporary->temporary_path()));
    tree.emplace(file->root());
  });
  NoGradGuard no_grad;
  for (const WeightGroup& group : groups) {
    attempt([&] {
      tree->at(group.path.empty() ? "layers" : group.path);  // Keras writes "layers" even empty
      tree->at(group.vars_path()).set_string_attribute("name", group.name);
    });
    for (std::size_t index = 0; index < group.variables.size(); ++index) {
      const Tensor& value = group.variables[index]->value;
      Tensor whole = checkpoint::full_tensor(value, value);
      attempt([&] { tree->at(group.vars_path()).write_dataset(std::to_string(index), whole); });
    }
  }
  if (with_optimizer) {
    optimizers::Optimizer& optimizer = model.optimizer();
    std::vector<Variable*> trainable = trainable_variables(model);
    // A LossScaleOptimizer is written built (its scale is state before any step; Keras builds
    // it with the model's first fit or compile from a config), an inner slot not made yet as
    // zeros, as Keras' built optimizer holds it.
    std::vector<OptimizerEntry> entries = keras_optimizer_entries(
        optimizer, trainable, optimizer.scales_loss() || optimizer_has_state(optimizer, trainable));
    const std::string optimizer_name =
        optimizer.scales_loss() ? "loss_scale_optimizer" : keras_optimizer_name(optimizer.name());
    attempt([&] { tree->at("optimizer/vars").set_string_attribute("name", optimizer_name); });
    std::size_t loss_scale_entries = 0;
    for (const OptimizerEntry& entry : entries) loss_scale_entries += is_loss_scale_optimizers_own(entry.kind) ? 1 : 0;
    if (optimizer.scales_loss()) {
      attempt([&] {
        tree->at("optimizer/inner_optimizer/vars").set_string_attribute("name", keras_optimizer_name(optimizer.name()));
      });
    }
    for (std::size_t index = 0; index < entries.size(); ++index) {
      const OptimizerEntry& entry = entries[index];
      Tensor tensor;
      if (is_scalar(entry.kind)) {
        tensor = optimizer_scalar(optimizer, entry.kind);
      } else {
        Tensor local = optimizer_tensor(optimizer, entry);
        // A variable without this state yet (no gradient reached it): zeros, as Keras' built
        // optimizer holds.
        if (!local.defined()) local = zeros_like(entry.variable->value);
        tensor = checkpoint::full_tensor(local, entry.variable->value);
      }
      attempt([&] { tree->at("optimizer/vars").write_dataset(std::to_string(index), tensor); });
      // Keras writes the inner optimizer of a LossScaleOptimizer again as its own object, and
      // warns when loading a file without it.
      if (optimizer.scales_loss() && !is_loss_scale_optimizers_own(entry.kind)) {
        attempt([&] {
          tree->at("optimizer/inner_optimizer/vars").write_dataset(std::to_string(index - loss_scale_entries), tensor);
        });
      }
    }
  }
  attempt([&] {
    tree.reset();
    file->close();
    file.reset();
    temporary->commit();
  });
  if (!gathered) {
    if (failure) std::rethrow_exception(failure);
    return {true, false};
  }
  distribution::agree_on_failure(failure, str("save_weights: writing '", path, "' (process 0 writes it)"));
  return {writes, true};
}

namespace {

// The group at `path` ("layers/dense/vars") below `root`, if every part of it is a group.
std::optional<Group> find_group(const Group& root, const std::string& path) {
  std::optional<Group> current;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t slash = path.find('/', start);
    std::string part = path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    const Group& parent = current ? *current : root;
    if (!parent.has_group(part)) return std::nullopt;
    current = parent.group(part);
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return current;
}

std::size_t dataset_count(const Group& group) {
  std::size_t count = 0;
  for (const std::string& name : group.member_names()) count += group.has_dataset(name) ? 1 : 0;
  return count;
}

// Every dataset's path below `group`, bounded: a damaged or hostile file may nest groups
// without end or link a group into itself (each object is visited once, by its address).
void collect_datasets(const Group& group, int depth, std::vector<std::string>& found,
                      std::set<std::uint64_t>& visited, const std::string& file_path) {
  constexpr int kMaxDepth = 64;
  constexpr std::size_t kMaxObjects = 100'000;
  if (depth > kMaxDepth || visited.size() > kMaxObjects) {
    throw FileFormatError(str("load_weights: '", file_path, "' nests groups deeper than ", kMaxDepth,
                              " or holds over ", kMaxObjects, " objects (damaged or hostile file?)"));
  }
  for (const std::string& name : group.member_names()) {
    if (!visited.insert(group.object_address(name)).second) {
      throw FileFormatError(str("load_weights: '", file_path, "' links '", group.path(), "/", name,
                                "' to an object it already holds (a cycle or a shared dataset); weight files "
                                "hold each object once"));
    }
    if (group.has_dataset(name)) {
      found.push_back(group.path().empty() ? name : group.path() + "/" + name);
    } else if (group.has_group(name)) {
      collect_datasets(group.group(name), depth + 1, found, visited, file_path);
    }
  }
}

std::string variable_names(const std::vector<Variable*>& variables) {
  std::string names;
  for (Variable* variable : variables) names += (names.empty() ? "" : ", ") + variable->name;
  return names;
}

// The optimizer's part of a file, read and checked: what load applies once all is read.
struct OptimizerState {
  std::optional<std::int64_t> iterations;
  std::optional<double> learning_rate;
  std::optional<double> loss_scale;
  std::optional<std::int64_t> loss_scale_steps;
  std::vector<std::pair<OptimizerEntry, Tensor>> tensors;
};

std::optional<OptimizerState> read_optimizer(const Group& root, Model& model, const std::string& path) {
  if (!model.compiled()) return std::nullopt;  // Keras, too, ignores it then
  std::optional<Group> vars = find_group(root, "optimizer/vars");
  if (!vars) return std::nullopt;
  optimizers::Optimizer& optimizer = model.optimizer();
  std::vector<Variable*> trainable = trainable_variables(model);
  std::vector<OptimizerEntry> full = keras_optimizer_entries(optimizer, trainable, true);
  std::vector<OptimizerEntry> bare = keras_optimizer_entries(optimizer, trainable, false);
  // Whether the file holds a LossScaleOptimizer is read from its structure (Keras writes the
  // inner optimizer as optimizer/inner_optimizer), not guessed from the count of variables,
  // which another optimizer's file may happen to share.
  const bool file_scales_loss = find_group(root, "optimizer/inner_optimizer").has_value();
  if (file_scales_loss != optimizer.scales_loss()) {
    if (distribution::process_id() == 0) {
      std::fprintf(stderr,
                   "load_weights: skipping the optimizer state in '%s': it was saved %s LossScaleOptimizer, and "
                   "optimizer '%s' of model '%s' %s; its weights are loaded\n",
                   path.c_str(), file_scales_loss ? "with" : "without", optimizer.name().c_str(),
                   model.name().c_str(), optimizer.scales_loss() ? "scales its loss" : "does not scale its loss");
    }
    return std::nullopt;
  }
  std::size_t count = dataset_count(*vars);
  if (count != full.size() && count != bare.size()) {
    if (distribution::process_id() == 0) {
      std::fprintf(stderr,
                   "load_weights: skipping the optimizer state in '%s': it holds %zu variables, and "
                   "optimizer '%s' of model '%s' has %zu (%zu before its first step); its weights "
                   "are loaded\n",
                   path.c_str(), count, optimizer.name().c_str(), model.name().c_str(), full.size(),
                   bare.size());
    }
    return std::nullopt;
  }
  const std::vector<OptimizerEntry>& entries = count == full.size() ? full : bare;
  OptimizerState state;
  for (std::size_t index = 0; index < entries.size(); ++index) {
    const OptimizerEntry& entry = entries[index];
    std::string name = std::to_string(index);
    if (is_scalar(entry.kind)) {
      io::hdf5::DatasetInfo info = vars->dataset_info(name);
      if (!info.shape.empty()) {
        throw ShapeError(str("load_weights: 'optimizer/vars/", name, "' in '", path, "' has shape ",
                             shape_to_string(info.shape), "; the optimizer's ", scalar_name(entry.kind),
                             " is a scalar"));
      }
      if (entry.kind == Kind::iterations || entry.kind == Kind::loss_scale_step_counter) {
        std::int64_t steps = vars->read_dataset(name, int64).to_vector<std::int64_t>()[0];
        if (steps < 0 || steps > (std::int64_t{1} << 53)) {
          throw FileFormatError(str("load_weights: 'optimizer/vars/", name, "' in '", path, "' gives the optimizer's ",
                                    scalar_name(entry.kind), " as ", steps, "; expected a count from 0 to 2^53"));
        }
        (entry.kind == Kind::iterations ? state.iterations : state.loss_scale_steps) = steps;
      } else if (entry.kind == Kind::learning_rate) {
        double rate = vars->read_dataset(name, float64).to_vector<double>()[0];
        if (!std::isfinite(rate) || rate < 0) {
          throw FileFormatError(str("load_weights: 'optimizer/vars/", name, "' in '", path,
                                    "' gives the learning rate ", rate, "; expected a finite rate of 0 or more"));
        }
        state.learning_rate = rate;
      } else if (entry.kind == Kind::loss_scale) {
        double scale = vars->read_dataset(name, float64).to_vector<double>()[0];
        if (!std::isfinite(scale) || scale <= 0) {
          throw FileFormatError(str("load_weights: 'optimizer/vars/", name, "' in '", path,
                                    "' gives the loss scale (dynamic_scale) ", scale, "; expected a finite scale > 0"));
        }
        state.loss_scale = scale;
      }
      // LossScaleOptimizer's own iteration and learning_rate: it never steps itself (0 in
      // every file Keras writes); the inner optimizer's are the ones that count.
      continue;
    }
    const Variable& variable = *entry.variable;
    state.tensors.emplace_back(
        entry, read_checked(*vars, name, variable.global_shape(), variable.value, path,
                            str("the optimizer's state of '", variable.path(), "'")));
  }
  return state;
}

void apply_optimizer(optimizers::Optimizer& optimizer, const OptimizerState& state) {
  if (state.iterations) optimizer.set_calls(*state.iterations);
  if (state.loss_scale && state.loss_scale_steps) optimizer.set_loss_scale_state(*state.loss_scale, *state.loss_scale_steps);
  if (state.learning_rate && !optimizer.learning_rate_schedule()) optimizer.set_learning_rate(*state.learning_rate);
  std::map<Variable*, std::vector<Tensor>> slots;
  std::map<Variable*, optimizers::Optimizer::OutsideSlots> outside;
  for (const auto& [entry, tensor] : state.tensors) {
    if (entry.kind == Kind::slot) {
      std::vector<Tensor>& held = slots[entry.variable];
      if (held.empty()) held = optimizer.slots_of(entry.variable->value);
      while (static_cast<int>(held.size()) <= entry.slot) held.push_back(zeros_like(entry.variable->value));
      held[static_cast<std::size_t>(entry.slot)] = tensor;
    } else if (entry.kind == Kind::average) {
      outside[entry.variable].average = tensor;
    } else if (entry.kind == Kind::accumulated) {
      outside[entry.variable].accumulated = tensor;
    }
  }
  for (const auto& [variable, held] : slots) optimizer.set_slots(variable->value, held);
  for (const auto& [variable, held] : outside) optimizer.set_outside_slots(variable->value, held);
}

}  // namespace

namespace {
void read_keras_weights(Model& model, const std::string& path, const std::vector<WeightGroup>& groups,
                        std::vector<std::pair<Variable*, Tensor>>& values,
                        std::optional<OptimizerState>& optimizer_state);
}  // namespace

void load_keras_weights(Model& model, const std::string& path) {
  std::vector<WeightGroup> groups = keras_weight_groups(model);
  // A sharded model is loaded by every process, each reading its blocks: a failure on one
  // (a damaged region only it reads, a full disk) is shared, so none goes on alone.
  bool sharded = false;
  for (const WeightGroup& group : groups) {
    for (Variable* variable : group.variables) sharded = sharded || variable->sharded();
  }
  bool collective = sharded && distribution::world().size() > 1;
  std::vector<std::pair<Variable*, Tensor>> values;
  std::optional<OptimizerState> optimizer_state;
  std::exception_ptr failure;
  try {
    read_keras_weights(model, path, groups, values, optimizer_state);
  } catch (...) {
    failure = std::current_exception();
  }
  if (collective) {
    distribution::agree_on_failure(failure, str("load_weights: reading '", path, "'"));
  } else if (failure) {
    std::rethrow_exception(failure);
  }
  NoGradGuard no_grad;
  for (auto& [variable, value] : values) variable->value.assign(value);
  if (optimizer_state) apply_optimizer(model.optimizer(), *optimizer_state);
}

namespace {

void read_keras_weights(Model& model, const std::string& path, const std::vector<WeightGroup>& groups,
                        std::vector<std::pair<Variable*, Tensor>>& values,
                        std::optional<OptimizerState>& optimizer_state) {
  io::hdf5::File file = io::hdf5::File::open(path);
  Group root = file.root();

  // Every block is read and checked first; nothing changes until all are.
  std::set<std::string> expected;
  for (const WeightGroup& group : groups) {
    std::optional<Group> vars = find_group(root, group.vars_path());
    if (!vars) {
      // A layer without variables may be missing (Keras skips it as well).
      if (group.variables.empty()) continue;
      throw ValueError(str("load_weights: '", path, "' has no group '", group.vars_path(), "', where ",
                           where(group), " of model '", model.name(), "' keeps its ",
                           group.variables.size(), " weights (", variable_names(group.variables),
                           "); is the file of another model?"));
    }
    std::size_t count = dataset_count(*vars);
    if (count != group.variables.size()) {
      throw ValueError(str("load_weights: '", group.vars_path(), "' in '", path, "' holds ", count,
                           " weights, but ", where(group), " (layer '", group.name, "') of model '",
                           model.name(), "' has ", group.variables.size(),
                           group.variables.empty() ? "" : str(" (", variable_names(group.variables), ")")));
    }
    for (std::size_t index = 0; index < group.variables.size(); ++index) {
      Variable* variable = group.variables[index];
      values.emplace_back(variable, read_checked(*vars, std::to_string(index), variable->global_shape(),
                                                 variable->value, path,
                                                 str("variable '", variable->path(), "'")));
      expected.insert(group.key(index));
    }
  }
  // A weight the model has no place for means the file is of another model.
  for (const std::string& name : root.member_names()) {
    if (name == "optimizer" || !root.has_group(name)) continue;
    std::vector<std::string> found;
    std::set<std::uint64_t> visited;
    collect_datasets(root.group(name), 1, found, visited, path);
    for (const std::string& dataset : found) {
      if (!expected.count(dataset)) {
        throw ValueError(str("load_weights: '", path, "' has weight '", dataset, "', for which model '",
                             model.name(), "' has no variable; is the file of another model?"));
      }
    }
  }
  optimizer_state = read_optimizer(root, model, path);
}

}  // namespace
}  // namespace keras::saving
