// Keras' weight-file layout of a model: the walk over its layers and the optimizer's order.
#include "saving/keras_weight_layout.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

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

// The layers of a model in Keras' order.
std::vector<LayerPtr> layers_of(const Model& model) {
  return model.graph() ? keras_layer_order(*model.graph()) : model.layers();
}

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
    walk_container(layers_of(*model), prefix + "layers/", groups);
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

// Keras' trainable_variables: a layer's own trainable variables, then its sublayers', none of
// a frozen layer's.
void collect_trainable(Layer& layer, std::vector<Variable*>& found) {
  if (!layer.trainable()) return;
  for (Variable* variable : layer.own_variables()) {
    if (variable->trainable) found.push_back(variable);
  }
  if (auto* model = dynamic_cast<Model*>(&layer)) {
    for (const LayerPtr& sublayer : layers_of(*model)) collect_trainable(*sublayer, found);
  } else {
    for (const LayerPtr& sublayer : layer.layers()) collect_trainable(*sublayer, found);
  }
}

}  // namespace

std::vector<LayerPtr> keras_layer_order(const FunctionalGraph& graph) {
  // Keras' map_graph: a depth-first walk from the outputs, each node after the nodes it reads
  // (an explicit stack: a hostile config may chain many thousands of layers), numbering the
  // layers in the order first reached; then node depths from the outputs (0) back, a layer at
  // its deepest node's depth; layers by decreasing depth, ties by that numbering.
  std::map<const Layer*, std::size_t> first_reached;
  std::vector<const KerasNode*> finished_order;
  std::set<const KerasNode*> finished;
  for (const KerasTensor& output : graph.outputs()) {
    std::vector<std::pair<const KerasNode*, std::size_t>> stack = {{output.node().get(), 0}};
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next == 0) {
        if (finished.count(node)) {
          stack.pop_back();
          continue;
        }
        first_reached.try_emplace(node->layer.get(), first_reached.size());
      }
      if (next < node->inputs.size()) {
        const KerasNode* input = node->inputs[next++].node().get();
        if (!finished.count(input)) stack.emplace_back(input, 0);
        continue;
      }
      finished.insert(node);
      finished_order.push_back(node);
      stack.pop_back();
    }
  }
  std::map<const KerasNode*, std::size_t> node_depth;
  std::map<const Layer*, std::size_t> layer_depth;
  for (auto it = finished_order.rbegin(); it != finished_order.rend(); ++it) {
    const KerasNode* node = *it;
    std::size_t depth = std::max(node_depth[node], layer_depth[node->layer.get()]);
    layer_depth[node->layer.get()] = depth;
    node_depth[node] = depth;
    for (const KerasTensor& input : node->inputs) {
      std::size_t& parent = node_depth[input.node().get()];
      parent = std::max(parent, depth + 1);
    }
  }
  std::vector<LayerPtr> order;
  for (const LayerPtr& layer : graph.layers()) {
    if (layer_depth.count(layer.get())) order.push_back(layer);
  }
  std::stable_sort(order.begin(), order.end(), [&](const LayerPtr& a, const LayerPtr& b) {
    std::size_t depth_a = layer_depth[a.get()], depth_b = layer_depth[b.get()];
    if (depth_a != depth_b) return depth_a > depth_b;
    return first_reached[a.get()] < first_reached[b.get()];
  });
  return order;
}

std::vector<Variable*> keras_trainable_variables(Model& model) {
  std::vector<Variable*> found;
  collect_trainable(model, found);
  return found;
}

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
  std::vector<OptimizerEntry> entries;
  if (optimizer.scales_loss()) {
    // Keras makes step_counter and dynamic_scale when it builds the optimizer, with the rest
    // of its state: an unbuilt LossScaleOptimizer has its own iteration and learning_rate only.
    entries = {{Kind::loss_scale_optimizer_iterations}, {Kind::loss_scale_optimizer_learning_rate}};
    if (with_state) entries.insert(entries.end(), {{Kind::loss_scale_step_counter}, {Kind::loss_scale}});
  }
  entries.push_back({Kind::iterations});
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
