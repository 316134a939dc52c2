// The functional graph (see the header).
#include "training/functional.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "distribution/sharding/step_context.h"
#include "engine/errors.h"
#include "layers/input_layer.h"
#include "layers/layer.h"

namespace keras {
namespace {
std::string joined(const std::vector<std::string>& parts) {
  std::string text;
  for (std::size_t i = 0; i < parts.size(); ++i) text += (i ? ", " : "") + parts[i];
  return text;
}
}  // namespace

FunctionalGraph::FunctionalGraph(std::vector<KerasTensor> inputs, std::vector<KerasTensor> outputs,
                                 std::vector<std::string> output_names)
    : inputs_(std::move(inputs)), outputs_(std::move(outputs)), output_names_(std::move(output_names)) {
  if (inputs_.empty()) throw ValueError("a functional Model needs at least one input (keras::Input)");
  if (outputs_.empty()) throw ValueError("a functional Model needs at least one output");
  std::set<const KerasNode*> input_nodes;
  for (std::size_t i = 0; i < inputs_.size(); ++i) {
    if (!inputs_[i].defined() || !inputs_[i].node()->is_input()) {
      throw ValueError(str("Model inputs: input ", i, " is not made by keras::Input (got ",
                           inputs_[i].defined() ? "the output of layer '" + inputs_[i].node()->layer->name() + "'"
                                                : std::string("an undefined KerasTensor"),
                           "); a functional model's inputs must be keras::Input tensors"));
    }
    if (!input_nodes.insert(inputs_[i].node().get()).second) {
      throw ValueError(str("Model inputs: '", inputs_[i].name(), "' is given twice"));
    }
  }
  // Depth-first from the outputs: a node joins the order after every node it reads.
  std::set<const KerasNode*> placed(input_nodes);
  for (std::size_t o = 0; o < outputs_.size(); ++o) {
    if (!outputs_[o].defined()) throw ValueError(str("Model outputs: output ", o, " is an undefined KerasTensor"));
    struct Frame {
      std::shared_ptr<KerasNode> node;
      std::size_t next_input;
    };
    std::vector<Frame> stack = {{outputs_[o].node(), 0}};
    std::set<const KerasNode*> on_stack;
    while (!stack.empty()) {
      Frame& frame = stack.back();
      if (placed.count(frame.node.get())) {
        stack.pop_back();
        continue;
      }
      if (frame.node->is_input()) {
        throw ValueError(str("graph disconnected: output ", o, " ('", outputs_[o].name(), "') depends on Input '",
                             frame.node->layer->name(), "', which is not among the model's inputs"));
      }
      if (frame.next_input < frame.node->inputs.size()) {
        std::shared_ptr<KerasNode> next = frame.node->inputs[frame.next_input++].node();
        stack.push_back({next, 0});
        continue;
      }
      placed.insert(frame.node.get());
      nodes_.push_back(frame.node);
      stack.pop_back();
    }
  }
  std::set<const Layer*> listed;
  auto list = [&](const LayerPtr& layer) {
    if (listed.insert(layer.get()).second) layers_.push_back(layer);
  };
  for (const KerasTensor& input : inputs_) list(input.node()->layer);
  for (const auto& node : nodes_) list(node->layer);
  if (output_names_.empty()) {
    for (const KerasTensor& output : outputs_) {
      const KerasNode& node = *output.node();
      output_names_.push_back(node.output_shapes.size() == 1 ? node.layer->name() : output.name());
    }
  }
  if (output_names_.size() != outputs_.size()) {
    throw ValueError(str("Model: ", output_names_.size(), " output names for ", outputs_.size(), " outputs"));
  }
  std::set<std::string> unique(output_names_.begin(), output_names_.end());
  if (unique.size() != output_names_.size()) {
    throw ValueError("Model outputs: two outputs have the same name (an output given twice?); name them with a map");
  }
  // The graph keeps no example values: a model may be large, and the shapes are recorded.
  for (const KerasTensor& output : outputs_) output.node()->release_examples();
}

std::vector<std::string> FunctionalGraph::input_names() const {
  std::vector<std::string> names;
  for (const KerasTensor& input : inputs_) names.push_back(input.name());
  return names;
}

std::vector<Tensor> FunctionalGraph::run(const std::vector<Tensor>& inputs, bool training) const {
  if (inputs.size() != inputs_.size()) {
    throw ValueError(str("the model takes ", inputs_.size(), " input(s) (", joined(input_names()),
                         "), but was given ", inputs.size()));
  }
  std::unordered_map<const KerasNode*, std::vector<Tensor>> values;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Shape& expected = inputs_[i].shape();
    const Tensor& value = inputs[i];
    if (!value.defined()) throw ValueError(str("model input '", inputs_[i].name(), "' is an undefined tensor"));
    Shape got = value.shape();
    bool fits = got.size() == expected.size();
    for (std::size_t d = 1; fits && d < got.size(); ++d) fits = got[d] == expected[d];
    if (!fits) {
      throw ShapeError(str("model input '", inputs_[i].name(), "' expects shape ", shape_to_string(expected),
                           " (-1: any batch size), got ", shape_to_string(got)));
    }
    values[inputs_[i].node().get()] = {value};
  }
  std::vector<Tensor> arguments;
  for (const auto& node : nodes_) {
    arguments.clear();
    for (const KerasTensor& input : node->inputs) arguments.push_back(values.at(input.node().get()).at(input.index()));
    std::vector<Tensor> produced = node->function(arguments, training);
    if (produced.size() != node->output_shapes.size()) {
      throw Error(str("layer '", node->layer->name(), "' gave ", produced.size(), " outputs at run time but ",
                      node->output_shapes.size(), " when its call was recorded"));
    }
    values[node.get()] = std::move(produced);
  }
  std::vector<Tensor> results;
  for (const KerasTensor& output : outputs_) results.push_back(values.at(output.node().get()).at(output.index()));
  return results;
}

namespace {
// The node index Keras prints counts the calls made in this model only: a shared layer called
// twice here is dense[0] and dense[1] whatever other graphs called it.
std::size_t index_in_graph(const KerasNode& node, const std::vector<std::shared_ptr<KerasNode>>& nodes) {
  std::size_t index = 0;
  for (const auto& other : nodes) {
    if (other.get() == &node) break;
    if (other->layer == node.layer) ++index;
  }
  return index;
}
}  // namespace

std::vector<std::string> FunctionalGraph::connections_of(const Layer& layer) const {
  std::vector<std::string> connections;
  for (const auto& node : nodes_) {
    if (node->layer.get() != &layer) continue;
    for (const KerasTensor& input : node->inputs) {
      const KerasNode& source = *input.node();
      connections.push_back(str(source.layer->name(), "[", source.is_input() ? 0 : index_in_graph(source, nodes_),
                                "][", input.index(), "]"));
    }
  }
  return connections;
}

std::vector<Shape> FunctionalGraph::output_shapes_of(const Layer& layer) const {
  for (const KerasTensor& input : inputs_) {
    if (input.node()->layer.get() == &layer) return input.node()->output_shapes;
  }
  for (auto node = nodes_.rbegin(); node != nodes_.rend(); ++node) {
    if ((*node)->layer.get() == &layer) return (*node)->output_shapes;
  }
  return {};
}

}  // namespace keras
