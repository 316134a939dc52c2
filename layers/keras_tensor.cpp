// Symbolic tensors and the recording of layer calls (see the header).
#include "layers/keras_tensor.h"

#include "layers/layer_config.h"

#include "engine/device.h"
#include "engine/errors.h"
#include "layers/input_layer.h"
#include "layers/layer.h"

namespace keras {

KerasTensor::KerasTensor(std::shared_ptr<KerasNode> node, std::size_t index)
    : node_(std::move(node)), index_(index) {}

namespace {
const KerasNode& checked(const std::shared_ptr<KerasNode>& node) {
  if (!node) throw ValueError("this KerasTensor is undefined (default-constructed); make one with keras::Input or a layer call");
  return *node;
}
}  // namespace

const Shape& KerasTensor::shape() const { return checked(node_).output_shapes.at(index_); }
DType KerasTensor::dtype() const { return checked(node_).output_dtypes.at(index_); }

std::string KerasTensor::name() const {
  const KerasNode& node = checked(node_);
  if (node.is_input()) return node.layer->name();
  return str(node.layer->name(), "/output_", index_);
}

Tensor KerasTensor::example() const {
  const KerasNode& node = checked(node_);
  if (node.examples.empty()) {
    std::vector<Tensor> inputs;
    for (const KerasTensor& input : node.inputs) inputs.push_back(input.example());
    NoGradGuard no_grad;
    node.examples = node.function(inputs, false);
  }
  return node.examples.at(index_);
}

void KerasNode::release_examples() const {
  std::vector<const KerasNode*> stack = {this};
  while (!stack.empty()) {
    const KerasNode* node = stack.back();
    stack.pop_back();
    if (node->examples.empty() && !node->is_input()) continue;  // this part is released already
    node->examples.clear();
    for (const KerasTensor& input : node->inputs) stack.push_back(input.node().get());
  }
}

namespace layers {
InputLayer::InputLayer(Shape shape, DType dtype, const std::string& name)
    : LayerOf("input_layer", name), shape_(std::move(shape)), dtype_(dtype) {
  for (std::int64_t dimension : shape_) {
    if (dimension <= 0) {
      throw ValueError(str("Input '", this->name(), "': shape ", shape_to_string(shape_),
                           " must have every dimension positive (the batch dimension is not part of it)"));
    }
  }
}

Tensor InputLayer::call(const Tensor& inputs, bool) { return inputs; }
}  // namespace layers

KerasTensor Input(const Shape& shape, DType dtype, const std::string& name) {
  auto layer = std::make_shared<layers::InputLayer>(shape, dtype, name);
  auto node = std::make_shared<KerasNode>();
  node->layer = layer;
  // An Input's example is a batch of one zero row; at run time a model hands it its data.
  Shape example_shape = {1};
  example_shape.insert(example_shape.end(), shape.begin(), shape.end());
  node->function = [example_shape, dtype](const std::vector<Tensor>&, bool) {
    return std::vector<Tensor>{Tensor::zeros(example_shape, dtype, default_device())};
  };
  Shape keras_shape = {-1};
  keras_shape.insert(keras_shape.end(), shape.begin(), shape.end());
  node->output_shapes = {keras_shape};
  node->output_dtypes = {dtype};
  node->call_index = layer->record_node();
  return KerasTensor(node, 0);
}

KerasTensor Input(const Shape& shape, const std::string& name) { return Input(shape, float32, name); }

std::vector<KerasTensor> record_layer_call(const LayerPtr& layer, const std::vector<KerasTensor>& inputs,
                                           NodeFunction function) {
  if (inputs.empty()) throw ValueError(str("layer '", layer->name(), "' was called on no symbolic tensors"));
  std::vector<Tensor> examples;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      throw ValueError(str("layer '", layer->name(), "': input ", i,
                           " is an undefined KerasTensor; make inputs with keras::Input or a layer call"));
    }
    examples.push_back(inputs[i].example());
  }
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = function(examples, false);
  }
  auto node = std::make_shared<KerasNode>();
  node->layer = layer;
  node->inputs = inputs;
  node->function = std::move(function);
  for (const Tensor& output : outputs) {
    Shape shape = output.shape();
    if (!shape.empty()) shape[0] = -1;
    node->output_shapes.push_back(shape);
    node->output_dtypes.push_back(output.dtype());
  }
  node->examples = std::move(outputs);
  node->call_index = layer->record_node();
  std::vector<KerasTensor> results;
  for (std::size_t i = 0; i < node->output_shapes.size(); ++i) results.emplace_back(node, i);
  return results;
}


namespace layers {

nlohmann::json InputLayer::get_config() const {
  nlohmann::json shape = nlohmann::json::array({nullptr});
  for (std::int64_t dimension : shape_) shape.push_back(dimension);
  return {{"batch_shape", shape}, {"dtype", dtype_name(dtype_)}, {"sparse", false},
          {"ragged", false}, {"name", name()}, {"optional", false}};
}

LayerPtr InputLayer::from_config(LayerConfig& config) {
  std::string name = config.name();
  const char* key = config.take("batch_input_shape") ? "batch_input_shape" : "batch_shape";
  std::vector<std::optional<std::int64_t>> batch_shape = config.shape(key);
  if (batch_shape.empty()) config.malformed(key, "a shape whose first dimension is the batch's");
  Shape shape;
  for (std::size_t axis = 1; axis < batch_shape.size(); ++axis) {
    if (!batch_shape[axis]) config.unsupported(key, "has an unknown dimension beyond the batch's; keras-cpp's inputs have fixed shapes");
    shape.push_back(*batch_shape[axis]);
  }
  std::string dtype = config.string("dtype", "float32");
  config.only("sparse", {false});
  config.only("ragged", {false});
  config.only("optional", {false});
  return std::make_shared<InputLayer>(shape, dtype_from_name(dtype), name);
}

}  // namespace layers

}  // namespace keras
