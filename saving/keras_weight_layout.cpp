// Keras' weight-file layout of a model: the walk over its layers and the optimizer's order.
#include "saving/keras_weight_layout.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "engine/errors.h"
#include "engine/optimizers.h"
#include "layers/layer_config.h"
#include "training/functional.h"
#include "training/model.h"

namespace keras::saving {
namespace {

// A layer's own variables as Keras numbers them: trainable ones first, then the others, each
// in creation order.
std::vector<Variable*> in_keras_order(std::vector<Variable*> variables) {
  std::stable_partition(variables.begin(), variables.end(),
                        [](const Variable* variable) { return variable->trainable; });
  return variables;
}

void walk(Layer& layer, const std::string& path, std::vector<WeightGroup>& groups);

// A model's layers, named by class in snake_case and numbered per class (Keras'
// _save_container_state).
void walk_container(const std::vector<LayerPtr>& layers, const std::string& path,
                    std::vector<WeightGroup>& groups) {
  std::map<std::string, int> used;
  for (const LayerPtr& layer : layers) {
    std::string name = to_snake_case(layer->class_name());
    auto [entry, first] = used.try_emplace(name, 0);
    if (!first) name = str(name, "_", ++entry->second);
    walk(*layer, path + name, groups);
  }
}

void walk(Layer& layer, const std::string& path, std::vector<WeightGroup>& groups) {
  std::string prefix = path.empty() ? "" : path + "/";
  if (auto* model = dynamic_cast<Model*>(&layer)) {
    walk_container(model->graph() ? model->graph()->layers() : model->layers(), prefix + "layers/",
                   groups);
  } else {
    for (const SavedSublayer& sublayer : layer.saved_sublayers()) {
      if (sublayer.layer) {
        walk(*sublayer.layer, prefix + sublayer.attribute, groups);
      } else {
        groups.push_back({prefix + sublayer.attribute, sublayer.empty_name, {}});
      }
    }
  }
  groups.push_back({path, layer.name(), in_keras_order(layer.own_variables())});
}

}  // namespace

std::string WeightGroup::vars_path() const { return path.empty() ? "vars" : path + "/vars"; }

std::string WeightGroup::key(std::size_t index) const {
  return vars_path() + "/" + std::to_string(index);
}

std::vector<WeightGroup> keras_weight_groups(Model& model) {
  std::vector<WeightGroup> groups;
  walk(model, "", groups);
  return groups;
}

std::vector<OptimizerEntry> keras_optimizer_entries(const optimizers::Optimizer& optimizer,
                                                    const std::vector<Variable*>& trainable,
                                                    bool with_state) {
  using Kind = OptimizerEntry::Kind;
  std::vector<OptimizerEntry> entries = {{Kind::iterations}};
  if (!optimizer.learning_rate_schedule()) entries.push_back({Kind::learning_rate});
  if (!with_state) return entries;
  if (optimizer.use_ema()) {
    for (Variable* variable : trainable) entries.push_back({Kind::average, variable});
  }
  if (optimizer.gradient_accumulation_steps() > 1) {
    for (Variable* variable : trainable) entries.push_back({Kind::accumulated, variable});
  }
  for (const std::vector<int>& group : optimizer.keras_slot_order()) {
    for (Variable* variable : trainable) {
      for (int slot : group) entries.push_back({Kind::slot, variable, slot});
    }
  }
  return entries;
}

}  // namespace keras::saving
