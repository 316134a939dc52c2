// Sequential and functional models to and from Keras' config.json.
#include "saving/model_config.h"

#include <cctype>
#include <map>
#include <optional>

#include "engine/errors.h"
#include "engine/losses.h"
#include "engine/optimizers.h"
#include "layers/input_layer.h"
#include "layers/keras_tensor.h"
#include "layers/layer_config.h"
#include "layers/merging.h"
#include "layers/multi_head_attention.h"
#include "saving/layer_registry.h"
#include "training/functional.h"
#include "training/model.h"

namespace keras::saving {
namespace {

// A shape as Keras writes one: the batch dimension (-1 here) is null.
nlohmann::json shape_json(const Shape& shape) {
  nlohmann::json result = nlohmann::json::array();
  for (std::int64_t dimension : shape) result.push_back(dimension < 0 ? nlohmann::json() : nlohmann::json(dimension));
  return result;
}

nlohmann::json with_build_config(nlohmann::json serialized, const Layer& layer) {
  nlohmann::json built = layer.build_config();
  if (!built.is_null()) serialized["build_config"] = built;
  return serialized;
}

nlohmann::json sequential_config(Sequential& model) {
  const Shape& input = model.build_input_shape();
  if (input.empty()) {
    throw ValueError(str("save: Sequential '", model.name(), "' has not been called, so its input ",
                         "shape is unknown; call it (or fit) once before saving"));
  }
  nlohmann::json layers_json = nlohmann::json::array();
  layers_json.push_back({{"module", "keras.layers"}, {"class_name", "InputLayer"},
                         {"config", {{"batch_shape", shape_json(input)}, {"dtype", "float32"}, {"sparse", false},
                                     {"ragged", false}, {"name", "input_layer"}, {"optional", false}}},
                         {"registered_name", nullptr}});
  for (const LayerPtr& layer : model.layers()) {
    if (dynamic_cast<Model*>(layer.get())) {
      throw NotImplementedError(str("save: model '", model.name(), "' holds model '", layer->name(),
                                    "'; keras-cpp does not yet save nested models"));
    }
    layers_json.push_back(with_build_config(serialize_layer(*layer), *layer));
  }
  nlohmann::json config = model.Layer::get_config();
  config["layers"] = layers_json;
  config["build_input_shape"] = shape_json(input);
  return {{"module", "keras"}, {"class_name", "Sequential"}, {"config", config}, {"registered_name", nullptr},
          {"build_config", {{"input_shape", shape_json(input)}}}};
}

// A symbolic tensor as an argument of an inbound node.
nlohmann::json tensor_argument(const KerasTensor& tensor, const std::map<const KerasNode*, std::size_t>& node_index) {
  return {{"class_name", "__keras_tensor__"},
          {"config", {{"shape", shape_json(tensor.shape())}, {"dtype", dtype_name(tensor.dtype())},
                      {"keras_history", {tensor.node()->layer->name(), node_index.at(tensor.node().get()), tensor.index()}}}}};
}

nlohmann::json functional_config(Model& model) {
  const FunctionalGraph& graph = *model.graph();
  // A node's index among its layer's calls in this graph (Keras' node_index).
  std::map<const KerasNode*, std::size_t> node_index;
  std::map<const Layer*, std::size_t> calls;
  std::map<const Layer*, std::vector<const KerasNode*>> nodes_of;
  for (const KerasTensor& input : graph.inputs()) {
    node_index[input.node().get()] = calls[input.node()->layer.get()]++;
  }
  for (const std::shared_ptr<KerasNode>& node : graph.nodes()) {
    node_index[node.get()] = calls[node->layer.get()]++;
    nodes_of[node->layer.get()].push_back(node.get());
  }
  nlohmann::json layers_json = nlohmann::json::array();
  for (const LayerPtr& layer : graph.layers()) {
    if (dynamic_cast<Model*>(layer.get())) {
      throw NotImplementedError(str("save: model '", model.name(), "' calls model '", layer->name(),
                                    "'; keras-cpp does not yet save nested models"));
    }
    nlohmann::json entry = with_build_config(serialize_layer(*layer), *layer);
    entry["name"] = layer->name();
    nlohmann::json inbound = nlohmann::json::array();
    for (const KerasNode* node : nodes_of[layer.get()]) {
      nlohmann::json args = nlohmann::json::array();
      if (dynamic_cast<const layers::Merge*>(layer.get())) {
        nlohmann::json list = nlohmann::json::array();
        for (const KerasTensor& input : node->inputs) list.push_back(tensor_argument(input, node_index));
        args.push_back(list);
      } else {
        for (const KerasTensor& input : node->inputs) args.push_back(tensor_argument(input, node_index));
        // Our symbolic MultiHeadAttention call is self-attention: Keras' mha(x, x).
        if (dynamic_cast<const layers::MultiHeadAttention*>(layer.get()) && node->inputs.size() == 1) {
          args.push_back(tensor_argument(node->inputs[0], node_index));
        }
      }
      inbound.push_back({{"args", args}, {"kwargs", nlohmann::json::object()}});
    }
    entry["inbound_nodes"] = inbound;
    layers_json.push_back(entry);
  }
  auto endpoints = [&](const std::vector<KerasTensor>& tensors) {
    nlohmann::json list = nlohmann::json::array();
    for (const KerasTensor& tensor : tensors) {
      list.push_back({tensor.node()->layer->name(), node_index.at(tensor.node().get()), tensor.index()});
    }
    return tensors.size() == 1 ? list[0] : list;
  };
  nlohmann::json config = {{"name", model.name()}, {"trainable", model.trainable()}, {"layers", layers_json},
                           {"input_layers", endpoints(graph.inputs())}, {"output_layers", endpoints(graph.outputs())}};
  return {{"module", "keras.src.models.functional"}, {"class_name", "Functional"}, {"config", config},
          {"registered_name", "Functional"}, {"build_config", {{"input_shape", nullptr}}}};
}

// Reads Keras' endpoint list: ["name", node, index] or a list of them.
std::vector<nlohmann::json> endpoint_list(const nlohmann::json& value, const char* what) {
  if (!value.is_array()) throw FileFormatError(str("load_model: the model's ", what, " is not a list"));
  if (!value.empty() && value[0].is_string()) return {value};
  return std::vector<nlohmann::json>(value.begin(), value.end());
}

class GraphBuilder {
 public:
  KerasTensor resolve(const nlohmann::json& history) const {
    if (!history.is_array() || history.size() != 3 || !history[0].is_string() || !history[1].is_number_unsigned() ||
        !history[2].is_number_unsigned()) {
      throw FileFormatError(str("load_model: a tensor's keras_history is ", history.dump().substr(0, 200),
                                "; expected [layer name, node index, tensor index]"));
    }
    std::string name = history[0].get<std::string>();
    auto found = outputs_.find(name);
    std::size_t node = history[1].get<std::size_t>(), index = history[2].get<std::size_t>();
    if (found == outputs_.end() || node >= found->second.size() || index >= found->second[node].size()) {
      throw FileFormatError(str("load_model: a call reads output ", index, " of call ", node, " of layer '", name,
                                "', which comes before it in no way the config says"));
    }
    return found->second[node][index];
  }
  KerasTensor argument(const nlohmann::json& value) const {
    if (!value.is_object() || value.value("class_name", "") != "__keras_tensor__" || !value.contains("config") ||
        !value["config"].is_object() || !value["config"].contains("keras_history")) {
      throw NotImplementedError(str("load_model: a call's argument is ", value.dump().substr(0, 200),
                                    "; keras-cpp takes symbolic tensors (and lists of them) only"));
    }
    return resolve(value["config"]["keras_history"]);
  }
  void add_input(const std::string& name, KerasTensor tensor) { outputs_[name].push_back({std::move(tensor)}); }
  void add_call(const std::string& name, KerasTensor tensor) { outputs_[name].push_back({std::move(tensor)}); }
  bool has_call(const std::pair<std::string, std::size_t>& key) const {
    auto found = outputs_.find(key.first);
    return found != outputs_.end() && key.second < found->second.size();
  }

 private:
  std::map<std::string, std::vector<std::vector<KerasTensor>>> outputs_;
};

KerasTensor call_layer(const LayerPtr& layer, const nlohmann::json& node, const GraphBuilder& graph) {
  if (!node.is_object() || !node.contains("args") || !node["args"].is_array()) {
    throw FileFormatError(str("load_model: a call of layer '", layer->name(), "' has no \"args\" list"));
  }
  if (node.contains("kwargs") && !(node["kwargs"].is_object() && node["kwargs"].empty())) {
    throw NotImplementedError(str("load_model: layer '", layer->name(), "' is called with keyword arguments ",
                                  node["kwargs"].dump().substr(0, 200), ", which keras-cpp does not take"));
  }
  const nlohmann::json& args = node["args"];
  if (auto* merge = dynamic_cast<layers::Merge*>(layer.get())) {
    if (args.size() != 1 || !args[0].is_array()) {
      throw FileFormatError(str("load_model: merging layer '", layer->name(), "' is called on ",
                                args.dump().substr(0, 200), "; expected one list of tensors"));
    }
    std::vector<KerasTensor> inputs;
    for (const nlohmann::json& item : args[0]) inputs.push_back(graph.argument(item));
    return (*merge)(inputs);
  }
  if (dynamic_cast<layers::MultiHeadAttention*>(layer.get()) && args.size() == 2) {
    KerasTensor query = graph.argument(args[0]), value = graph.argument(args[1]);
    if (!query.same_as(value)) {
      throw NotImplementedError(str("load_model: MultiHeadAttention '", layer->name(), "' attends from one ",
                                    "tensor to another; keras-cpp's functional graphs take self-attention only"));
    }
    return (*layer)(query);
  }
  if (args.size() != 1 || args[0].is_array()) {
    throw NotImplementedError(str("load_model: layer '", layer->name(), "' is called with ", args.size(),
                                  " arguments; keras-cpp calls it on one tensor"));
  }
  return (*layer)(graph.argument(args[0]));
}

// Past this many layers a config is refused: a graph is torn down recursively, and no model
// of this engine's size has near as many.
constexpr std::size_t kMaxLayers = 10'000;

void check_layer_count(const nlohmann::json& layers) {
  if (layers.size() > kMaxLayers) {
    throw FileFormatError(str("load_model: the config lists ", layers.size(), " layers; at most ", kMaxLayers,
                              " are made"));
  }
}

std::shared_ptr<Model> functional_from_config(const nlohmann::json& config) {
  if (!config.contains("layers") || !config["layers"].is_array()) {
    throw FileFormatError("load_model: the functional model's config has no \"layers\" list");
  }
  check_layer_count(config["layers"]);
  GraphBuilder graph;
  // Every layer is made first; its calls are then made as their inputs come to exist, each
  // layer's calls in their order (Keras' node indices), as Keras defers a call that reads a
  // layer listed after it (a shared layer called at two depths: d(e(d(x)))). Kahn's order:
  // a call waits on the (layer, call) pairs it reads and on its layer's previous call.
  struct Call {
    LayerPtr layer;
    std::size_t index;
    const nlohmann::json* node;
    std::size_t waiting = 0;
  };
  using Key = std::pair<std::string, std::size_t>;
  std::vector<Call> calls;
  std::map<std::string, std::size_t> calls_of;  // by layer name: how many it has (inputs: 1)
  std::vector<nlohmann::json> nodes_of_layers;
  nodes_of_layers.reserve(config["layers"].size());
  for (const nlohmann::json& entry : config["layers"]) {
    if (!entry.is_object()) throw FileFormatError("load_model: a layer entry is not an object");
    LayerPtr layer = layer_from_config(entry);
    std::string name = layer->name();
    if (calls_of.count(name)) throw FileFormatError(str("load_model: two layers are named '", name, "'"));
    if (auto* input = dynamic_cast<layers::InputLayer*>(layer.get())) {
      graph.add_input(name, Input(input->shape(), input->dtype(), name));
      calls_of[name] = 1;
      continue;
    }
    nodes_of_layers.push_back(entry.value("inbound_nodes", nlohmann::json::array()));
    const nlohmann::json& nodes = nodes_of_layers.back();
    if (!nodes.is_array()) throw FileFormatError(str("load_model: layer '", name, "' has no inbound_nodes list"));
    if (nodes.empty()) {
      throw NotImplementedError(str("load_model: layer '", name, "' is never called in the model"));
    }
    if (calls.size() + nodes.size() > 10 * kMaxLayers) {
      throw FileFormatError(str("load_model: the config makes over ", 10 * kMaxLayers, " calls of layers"));
    }
    for (std::size_t index = 0; index < nodes.size(); ++index) calls.push_back({layer, index, &nodes[index]});
    calls_of[name] = nodes.size();
  }
  std::map<Key, std::vector<std::size_t>> waiters;
  std::vector<std::size_t> ready;
  for (std::size_t position = 0; position < calls.size(); ++position) {
    Call& call = calls[position];
    std::vector<Key> needs;
    if (call.index > 0) needs.emplace_back(call.layer->name(), call.index - 1);
    std::vector<const nlohmann::json*> pending = {call.node};
    while (!pending.empty()) {  // the keras_history of every tensor among the arguments
      const nlohmann::json* value = pending.back();
      pending.pop_back();
      if (value->is_array()) {
        for (const nlohmann::json& item : *value) pending.push_back(&item);
      } else if (value->is_object() && value->contains("keras_history")) {
        const nlohmann::json& history = (*value)["keras_history"];
        if (!history.is_array() || history.size() != 3 || !history[0].is_string() || !history[1].is_number_unsigned()) {
          throw FileFormatError(str("load_model: a tensor's keras_history is ", history.dump().substr(0, 200),
                                    "; expected [layer name, node index, tensor index]"));
        }
        Key key(history[0].get<std::string>(), history[1].get<std::size_t>());
        auto found = calls_of.find(key.first);
        if (found == calls_of.end() || key.second >= found->second) {
          throw FileFormatError(str("load_model: layer '", call.layer->name(), "' reads call ", key.second,
                                    " of layer '", key.first, "', which the config does not have"));
        }
        needs.push_back(key);
      } else if (value->is_object()) {
        for (const auto& [field, item] : value->items()) pending.push_back(&item);
      }
    }
    for (const Key& key : needs) {
      if (graph.has_call(key)) continue;  // an input's
      waiters[key].push_back(position);
      ++call.waiting;
    }
    if (call.waiting == 0) ready.push_back(position);
  }
  std::size_t made = 0;
  while (!ready.empty()) {
    Call& call = calls[ready.back()];
    ready.pop_back();
    graph.add_call(call.layer->name(), call_layer(call.layer, *call.node, graph));
    ++made;
    auto woken = waiters.find(Key(call.layer->name(), call.index));
    if (woken == waiters.end()) continue;
    for (std::size_t position : woken->second) {
      if (--calls[position].waiting == 0) ready.push_back(position);
    }
  }
  if (made != calls.size()) {
    for (const Call& call : calls) {
      if (call.waiting > 0) {
        throw FileFormatError(str("load_model: call ", call.index, " of layer '", call.layer->name(),
                                  "' reads its own output, directly or through other layers (a cycle)"));
      }
    }
  }
  std::vector<KerasTensor> inputs, outputs;
  for (const nlohmann::json& endpoint : endpoint_list(config.value("input_layers", nlohmann::json()), "input_layers")) {
    inputs.push_back(graph.resolve(endpoint));
  }
  for (const nlohmann::json& endpoint : endpoint_list(config.value("output_layers", nlohmann::json()), "output_layers")) {
    outputs.push_back(graph.resolve(endpoint));
  }
  std::string name = config.value("name", nlohmann::json("")).is_string() ? config.value("name", std::string()) : "";
  auto model = std::make_shared<Model>(std::move(inputs), std::move(outputs), name);
  if (config.contains("trainable") && config["trainable"].is_boolean()) model->set_trainable(config["trainable"].get<bool>());
  return model;
}

std::shared_ptr<Model> sequential_from_config(const nlohmann::json& config, const nlohmann::json& outer) {
  if (!config.contains("layers") || !config["layers"].is_array()) {
    throw FileFormatError("load_model: the Sequential's config has no \"layers\" list");
  }
  check_layer_count(config["layers"]);
  std::string name = config.value("name", nlohmann::json("")).is_string() ? config.value("name", std::string()) : "";
  auto model = std::make_shared<Sequential>(std::vector<AnyLayer>{}, name);
  std::optional<Shape> input_shape;
  for (const nlohmann::json& entry : config["layers"]) {
    LayerPtr layer = layer_from_config(entry);
    if (auto* input = dynamic_cast<layers::InputLayer*>(layer.get())) {
      if (input_shape) throw NotImplementedError("load_model: a Sequential with two InputLayers");
      input_shape = input->shape();
      continue;
    }
    model->add(layer);
  }
  if (!input_shape) {
    // Keras' build_input_shape (or the model's build_config) when no InputLayer was listed.
    nlohmann::json shape = config.value("build_input_shape", nlohmann::json());
    if (shape.is_null() && outer.contains("build_config") && outer["build_config"].is_object()) {
      shape = outer["build_config"].value("input_shape", nlohmann::json());
    }
    if (!shape.is_array() || shape.empty()) {
      throw NotImplementedError("load_model: the Sequential has no InputLayer or build_input_shape, so "
                                "keras-cpp cannot build it to load its weights");
    }
    input_shape = Shape();
    for (std::size_t axis = 1; axis < shape.size(); ++axis) {
      if (!shape[axis].is_number_integer() || shape[axis].get<std::int64_t>() <= 0) {
        throw NotImplementedError(str("load_model: the Sequential's input shape ", shape.dump().substr(0, 200),
                                      " is not fixed beyond the batch"));
      }
      input_shape->push_back(shape[axis].get<std::int64_t>());
    }
  }
  Shape example = {1};
  example.insert(example.end(), input_shape->begin(), input_shape->end());
  (*model)(Tensor::zeros(example));
  if (config.contains("trainable") && config["trainable"].is_boolean()) model->set_trainable(config["trainable"].get<bool>());
  return model;
}

// Keras' compile_config of a compiled model: the optimizer serialized as Keras' own, the losses
// by name. Null when Keras could not make the optimizer (one of one's own, or a learning-rate
// schedule of ours); compiling then is the user's, in Python as here.
nlohmann::json compile_config(Model& model) {
  if (!model.compiled()) return nullptr;
  const optimizers::Optimizer& optimizer = model.optimizer();
  if (optimizer.keras_class_name().empty() || optimizer.learning_rate_schedule()) return nullptr;
  std::string name = optimizer.name();
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto or_null = [](double value) { return value > 0 ? nlohmann::json(value) : nlohmann::json(); };
  nlohmann::json config = {{"name", name},
                           {"learning_rate", optimizer.learning_rate()},
                           {"weight_decay", or_null(optimizer.weight_decay())},
                           {"clipnorm", or_null(optimizer.clipnorm())},
                           {"global_clipnorm", or_null(optimizer.global_clipnorm())},
                           {"clipvalue", or_null(optimizer.clipvalue())},
                           {"use_ema", optimizer.use_ema()},
                           {"ema_momentum", optimizer.ema_momentum()},
                           {"ema_overwrite_frequency", optimizer.ema_overwrite_frequency() > 0
                                                           ? nlohmann::json(optimizer.ema_overwrite_frequency())
                                                           : nlohmann::json()},
                           {"loss_scale_factor", nullptr},
                           {"gradient_accumulation_steps", optimizer.gradient_accumulation_steps() > 1
                                                               ? nlohmann::json(optimizer.gradient_accumulation_steps())
                                                               : nlohmann::json()}};
  for (const optimizers::Optimizer::KerasArgument& argument : optimizer.keras_arguments()) {
    config[argument.name] = argument.boolean ? nlohmann::json(argument.value != 0.0) : nlohmann::json(argument.value);
  }
  nlohmann::json optimizer_json = config_json::serialized("keras.optimizers", optimizer.keras_class_name(), config);
  if (optimizer.scales_loss()) {
    // Keras' LossScaleOptimizer around the inner optimizer (only "name" of the base's options).
    optimizer_json = config_json::serialized("keras.optimizers", "LossScaleOptimizer",
                                             {{"name", "loss_scale_optimizer"},
                                              {"inner_optimizer", optimizer_json},
                                              {"initial_scale", optimizer.initial_loss_scale()},
                                              {"dynamic_growth_steps", optimizer.loss_scale_growth_steps()}});
  }
  nlohmann::json loss = nlohmann::json::array();
  for (const losses::LossPtr& each : model.compiled_losses()) loss.push_back(each->name());
  return {{"optimizer", optimizer_json},
          {"loss", loss.size() == 1 ? loss[0] : loss},
          {"loss_weights", nullptr},
          {"metrics", nullptr},
          {"weighted_metrics", nullptr},
          {"run_eagerly", false},
          {"steps_per_execution", 1},
          {"jit_compile", true}};
}

}  // namespace

std::shared_ptr<Model> model_from_checked_config(const nlohmann::json& config);

nlohmann::json model_config(Model& model) {
  if (auto* sequential = dynamic_cast<Sequential*>(&model)) {
    nlohmann::json config = sequential_config(*sequential);
    if (nlohmann::json compile = compile_config(model); !compile.is_null()) config["compile_config"] = compile;
    return config;
  }
  if (model.graph()) {
    nlohmann::json config = functional_config(model);
    if (nlohmann::json compile = compile_config(model); !compile.is_null()) config["compile_config"] = compile;
    return config;
  }
  throw NotImplementedError(str("save: model '", model.name(), "' is subclassed (it overrides call), so it has ",
                                "no config to be made from; save its weights with save_weights(\"",
                                model.name(), ".weights.h5\") instead"));
}

std::shared_ptr<Model> model_from_config(const nlohmann::json& config) {
  // A field of an unexpected JSON type met by a lookup with a default (nlohmann's value())
  // is a malformed file, said as such.
  try {
    return model_from_checked_config(config);
  } catch (const nlohmann::json::exception& error) {
    throw FileFormatError(str("load_model: config.json has a field of an unexpected type: ", error.what()));
  }
}

std::shared_ptr<Model> model_from_checked_config(const nlohmann::json& config) {
  if (!config.is_object() || !config.contains("class_name") || !config["class_name"].is_string()) {
    throw FileFormatError("load_model: config.json is not Keras' serialized model (an object with a \"class_name\")");
  }
  std::string class_name = config["class_name"].get<std::string>();
  const nlohmann::json inner = config.value("config", nlohmann::json::object());
  if (!inner.is_object()) throw FileFormatError("load_model: the model's \"config\" is not an object");
  if (class_name == "Sequential") return sequential_from_config(inner, config);
  if (class_name == "Functional" || class_name == "Model") return functional_from_config(inner);
  throw NotImplementedError(str("load_model: the model is a '", class_name, "'; keras-cpp makes Sequential and ",
                                "functional models from configs (a subclassed model has no config to make it from)"));
}

}  // namespace keras::saving
