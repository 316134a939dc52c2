// The graph of a functional model (keras.Model(inputs, outputs)): the nodes recorded by calling
// layers on KerasTensors (layers/keras_tensor.h), put in an order that runs each node after
// the nodes it reads, and run on real tensors by Model::call and Model::call_many.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "layers/keras_tensor.h"

namespace keras {

class FunctionalGraph {
 public:
  // Walks back from `outputs`; every Input reached must be among `inputs` (else a ValueError
  // names it, Keras' "graph disconnected"). `output_names`: Keras' names of the outputs (the
  // keys of a dict of outputs; else the producing layers' names).
  FunctionalGraph(std::vector<KerasTensor> inputs, std::vector<KerasTensor> outputs,
                  std::vector<std::string> output_names = {});

  // Runs the graph on one value per input; gives one value per output.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, bool training) const;

  const std::vector<KerasTensor>& inputs() const { return inputs_; }
  const std::vector<KerasTensor>& outputs() const { return outputs_; }
  const std::vector<std::string>& output_names() const { return output_names_; }
  std::vector<std::string> input_names() const;
  // Every node but the inputs', in the order run() calls them.
  const std::vector<std::shared_ptr<KerasNode>>& nodes() const { return nodes_; }
  // The layers in Keras' order: the inputs' first, then each layer at its first call.
  const std::vector<LayerPtr>& layers() const { return layers_; }
  // Keras' "Connected to" for a layer: "dense[0][0]" for each input of each of its calls here.
  std::vector<std::string> connections_of(const Layer& layer) const;
  // The output shape of `layer`'s last call here (batch dimension -1).
  std::vector<Shape> output_shapes_of(const Layer& layer) const;

 private:
  std::vector<KerasTensor> inputs_;
  std::vector<KerasTensor> outputs_;
  std::vector<std::string> output_names_;
  std::vector<std::shared_ptr<KerasNode>> nodes_;
  std::vector<LayerPtr> layers_;
};

}  // namespace keras
