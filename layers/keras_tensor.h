// Symbolic tensors for Keras' functional API: keras::Input gives a KerasTensor, calling a layer
// on KerasTensors records a KerasNode (one call of one layer) and gives the node's outputs, and
// keras::Model(inputs, outputs) (training/functional.h) runs the recorded graph.
//
// A KerasTensor knows its shape, batch dimension -1 (Keras' None), and dtype without a symbolic
// backend: recording a call runs the layer once on an example batch of one zero row (building
// it, as Keras builds a layer at its first symbolic call). That is the layer's own code path, so
// the shapes are exact for every layer, a user's included, and under a distribution it is an
// ordinary call outside any step (docs/ARCHITECTURE.md, "Sharding at op dispatch"): every
// process records the same graph, so every process runs the same collectives. The examples are
// released when a Model is made from the graph and computed again only if the graph grows.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace keras {

class Layer;
using LayerPtr = std::shared_ptr<Layer>;
struct KerasNode;

class KerasTensor {
 public:
  KerasTensor() = default;
  KerasTensor(std::shared_ptr<KerasNode> node, std::size_t index);

  bool defined() const { return node_ != nullptr; }
  // Keras' shape: the batch dimension is -1 (None).
  const Shape& shape() const;
  std::int64_t rank() const { return static_cast<std::int64_t>(shape().size()); }
  DType dtype() const;
  // "dense/output_0" style: the producing layer's name (an Input's own name).
  std::string name() const;

  const std::shared_ptr<KerasNode>& node() const { return node_; }
  std::size_t index() const { return index_; }
  // This tensor's value for the example batch of one row (computed again if it was released).
  Tensor example() const;
  // Whether two handles name the same symbolic tensor.
  bool same_as(const KerasTensor& other) const {
    return node_ == other.node_ && index_ == other.index_;
  }

 private:
  std::shared_ptr<KerasNode> node_;
  std::size_t index_ = 0;
};

// Runs a recorded call: the node's input values in, its output values out.
using NodeFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs, bool training)>;

// One call of one layer in a functional graph (Keras' Node). An Input's node has no inputs; its
// layer is the InputLayer that names it.
struct KerasNode {
  LayerPtr layer;
  std::vector<KerasTensor> inputs;
  NodeFunction function;
  std::vector<Shape> output_shapes;  // batch dimension -1
  std::vector<DType> output_dtypes;
  // Which call of `layer` this is (Keras' node index in "Connected to": dense[1][0]).
  std::size_t call_index = 0;
  mutable std::vector<Tensor> examples;  // empty once released

  bool is_input() const { return inputs.empty(); }
  // Drops the example values of this node and of every node it depends on.
  void release_examples() const;
};

// keras.Input: a symbolic input of `shape` (without the batch dimension). An empty name gets
// Keras' "input_layer", "input_layer_1", ...
KerasTensor Input(const Shape& shape, DType dtype = float32, const std::string& name = "");
KerasTensor Input(const Shape& shape, const std::string& name);

// Records `layer` called on `inputs` through `function` (what the layer's operator() runs on
// real tensors) and gives the node's outputs. Used by Layer's symbolic operator() and by
// layers that take several inputs; `what` names the call in errors.
std::vector<KerasTensor> record_layer_call(const LayerPtr& layer, const std::vector<KerasTensor>& inputs,
                                           NodeFunction function);

}  // namespace keras
