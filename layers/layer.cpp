// Layer bookkeeping: names, paths, building, weights.
#include "layers/layer.h"
#include "engine/ops.h"

#include "layers/layer_config.h"

#include <cctype>
#include <map>
#include <mutex>
#include <optional>

#include "distribution/api/distribution.h"
#include "distribution/sharding/sharded_tensor.h"
#include "distribution/sharding/sharding_propagator.h"
#include "distribution/sharding/step_context.h"
#include "engine/errors.h"
#include "engine/op_dispatch.h"
#include "layers/variable_creation.h"

namespace keras {
namespace {
std::mutex names_mutex;
std::map<std::string, int>& name_counts() {
  static std::map<std::string, int> counts;
  return counts;
}
}  // namespace

std::string unique_layer_name(const std::string& prefix) {
  std::lock_guard lock(names_mutex);
  int& count = name_counts()[prefix];
  std::string name = count == 0 ? prefix : prefix + "_" + std::to_string(count);
  count += 1;
  return name;
}

void clear_session() {
  {
    std::lock_guard lock(names_mutex);
    name_counts().clear();
  }
  distribution::set_distribution(nullptr);  // as keras.utils.clear_session() does
  distribution::forget_gathered_operations();
}

Layer::Layer(const std::string& default_prefix, const std::string& name)
    : name_(name.empty() ? unique_layer_name(default_prefix) : name), prefix_(default_prefix),
      dtype_policy_(mixed_precision::global_policy()) {
  if (name_.find('/') != std::string::npos) {
    throw ValueError(str("layer name '", name_, "' contains '/', which separates path parts"));
  }
}

Tensor Layer::place_output(Tensor outputs, const distribution::ShardingContext* sharded,
                           const distribution::TensorLayoutPtr& layout) {
  if (!outputs.defined()) return outputs;
  Shape shape = outputs.shape();
  if (sharded) {
    std::string output_path = path() + "/output";
    if (layout) {
      distribution::Sharding current = sharded->activation_sharding(outputs);
      distribution::Sharding target =
          sharded->activation_target(*layout, current, str("layer output '", output_path, "'"));
      outputs = sharded->relayout(outputs, current, target);
    }
    shape = sharded->activation_sharding(outputs).global_shape();
  }
  output_shape_ = shape;
  if (!output_shape_.empty()) output_shape_[0] = -1;
  return outputs;
}

distribution::TensorLayoutPtr Layer::output_layout(const distribution::ShardingContext& sharded) const {
  return sharded.active->get_tensor_layout(path() + "/output");
}

namespace {

// What a call hands back. Called by user code outside any step (model(x) in a hand-written loop),
// a layer gives its output whole, in the data layout: there no handler is installed, so a
// sharded output would reach the user's ops as a block that looks whole (docs/ARCHITECTURE.md,
// "Sharding at op dispatch"). Inside a step (the trainer's, or another layer's call) it stays as
// it lies: the next layer's ops and the loss follow their rules.
Tensor handed_out(const Tensor& outputs, const distribution::StepContext& step,
                  const distribution::ShardingContext& sharded) {
  return step.outermost() ? sharded.to_data_layout(outputs) : outputs;
}

}  // namespace

Tensor Layer::run_call(const std::function<Tensor()>& body) {
  built_ = true;
  // The call's own bookkeeping (placing the output) reads stored blocks: no handler, even
  // when this layer is called inside another's call.
  ShardedOpScope bookkeeping(nullptr);
  distribution::StepContext step_context;  // joins the trainer's, or resolves the sharding for this call
  const distribution::ShardingContext* sharded = distribution::StepContext::sharding();
  AutocastScope autocast(call_autocast());
  if (!sharded) return place_output(body(), sharded, nullptr);
  distribution::TensorLayoutPtr layout = output_layout(*sharded);  // one LayoutMap lookup a call
  distribution::ShardingPropagator propagator(*sharded, path(), layout);
  Tensor outputs;
  {
    ShardedOpScope sharded_ops(&propagator);
    outputs = body();
  }
  return handed_out(place_output(outputs, sharded, layout), step_context, *sharded);
}

std::vector<Tensor> Layer::run_call_many(const std::function<std::vector<Tensor>()>& body) {
  built_ = true;
  ShardedOpScope bookkeeping(nullptr);
  distribution::StepContext step_context;
  const distribution::ShardingContext* sharded = distribution::StepContext::sharding();
  AutocastScope autocast(call_autocast());
  std::vector<Tensor> outputs;
  if (!sharded) {
    outputs = body();
    if (!outputs.empty()) place_output(outputs[0], sharded, nullptr);
    return outputs;
  }
  distribution::ShardingPropagator propagator(*sharded, path(), nullptr);
  {
    ShardedOpScope sharded_ops(&propagator);
    outputs = body();
  }
  if (!outputs.empty()) place_output(outputs[0], sharded, nullptr);  // notes the first output's shape
  for (Tensor& output : outputs) {
    if (output.defined()) output = handed_out(output, step_context, *sharded);
  }
  return outputs;
}

Tensor Layer::operator()(const Tensor& inputs, bool training) {
  if (!inputs.defined()) throw ValueError(str("layer '", name_, "' was called on an undefined tensor"));
  // The call's own bookkeeping (placing the output) reads stored blocks: no handler, even when
  // this layer is called inside another's call.
  ShardedOpScope bookkeeping(nullptr);
  distribution::StepContext step_context;  // joins the trainer's, or resolves the sharding for this call
  const distribution::ShardingContext* sharded = distribution::StepContext::sharding();
  // The input as it lies: call() is written on whole tensors and its ops follow their rules.
  if (!built_) {
    Shape shape = sharded ? sharded->logical_shape(inputs) : inputs.shape();
    build(shape);
    built_ = true;
    if (!shape.empty()) shape[0] = -1;
    build_input_shape_ = shape;
  }
  Tensor converted = to_compute_dtype(inputs);
  AutocastScope autocast(call_autocast());
  if (!sharded) return place_output(call(converted, training), sharded, nullptr);
  // Every op of call() on a sharded operand (this layer's sharded weights, a sharded activation)
  // goes through the propagator: it follows the op's rule or gathers (docs/ARCHITECTURE.md).
  distribution::TensorLayoutPtr layout = output_layout(*sharded);  // one LayoutMap lookup a call
  distribution::ShardingPropagator propagator(*sharded, path(), layout);
  Tensor outputs;
  {
    ShardedOpScope sharded_ops(&propagator);
    outputs = call(converted, training);
  }
  return handed_out(place_output(outputs, sharded, layout), step_context, *sharded);
}

std::string Layer::class_name() const { return from_snake_case(prefix_); }

Shape Variable::global_shape() const {
  std::optional<distribution::Sharding> sharding = distribution::sharding_of(value);
  return sharding ? sharding->global_shape() : value.shape();
}

bool Variable::sharded() const {
  std::optional<distribution::Sharding> sharding = distribution::sharding_of(value);
  return sharding && !sharding->is_replicated();
}

void Layer::build(const Shape&) {}

void Layer::set_dtype_policy(const DTypePolicy& policy) {
  if (built_ && !(policy == dtype_policy_)) {
    throw ValueError(str("layer '", path(), "' is built with the dtype policy '",
                         dtype_policy_.name(), "'; set '", policy.name(),
                         "' before its first call (its variables exist in the old dtype)"));
  }
  dtype_policy_ = policy;
}

Tensor Layer::to_compute_dtype(const Tensor& input) const {
  DType compute = compute_dtype();
  if (!is_floating(input.dtype()) || input.dtype() == compute) return input;
  if (!is_half_precision(compute) && !is_half_precision(input.dtype())) return input;
  return ops::cast(input, compute);
}

std::optional<Autocast> Layer::call_autocast() const {
  return autocast_ ? dtype_policy_.autocast() : std::nullopt;
}

void Layer::set_random_counters(const std::vector<std::uint64_t>& counters) {
  if (!counters.empty()) {
    throw ValueError(str("layer '", path(), "' draws no random numbers, but was given ",
                         counters.size(), " random counter(s)"));
  }
}

std::string Layer::path() const {
  return parent_path_.empty() ? name_ : parent_path_ + "/" + name_;
}

void Layer::track_keeping_path(const LayerPtr& layer) {
  if (!layer) throw ValueError(str("layer '", name_, "': add_layer got a null layer"));
  for (const LayerPtr& existing : sublayers_) {
    if (existing->name() == layer->name()) {
      throw ValueError(str("layer '", name_, "' already has a sublayer named '", layer->name(),
                           "'; layer names must be unique inside a model"));
    }
  }
  sublayers_.push_back(layer);
}

void Layer::track(const LayerPtr& layer) {
  track_keeping_path(layer);
  layer->parent_path_ = path();
  // Sublayers of the new layer already know their parent; refresh their prefixes.
  std::vector<Layer*> stack = {layer.get()};
  while (!stack.empty()) {
    Layer* current = stack.back();
    stack.pop_back();
    for (const LayerPtr& child : current->sublayers_) {
      child->parent_path_ = current->path();
      stack.push_back(child.get());
    }
  }
}

LayerPtr Layer::shared_for_graph() {
  LayerPtr owner = weak_from_this().lock();
  if (!owner) {
    throw ValueError(str("layer '", name_, "' (", class_name(), ") was called on a symbolic tensor by name, but ",
                         "no std::shared_ptr holds it, so a model made from the graph could outlive it; ",
                         "call a temporary (layers::Dense(64)(inputs)) or, for a layer called more than ",
                         "once, create it with std::make_shared"));
  }
  return owner;
}

LayerPtr Layer::moved_into_shared() && {
  throw ValueError(str("a temporary layer '", name_, "' (", class_name(), ") was called on a symbolic tensor, ",
                       "but its class cannot be moved into the graph; derive it from keras::LayerOf<", class_name(),
                       "> (layers/layer.h) or create it with std::make_shared"));
}

namespace {
NodeFunction single_input_call(const LayerPtr& layer) {
  return [layer](const std::vector<Tensor>& inputs, bool training) {
    return std::vector<Tensor>{(*layer)(inputs.at(0), training)};
  };
}
}  // namespace

KerasTensor Layer::operator()(const KerasTensor& inputs) & {
  LayerPtr owner = shared_for_graph();
  return record_layer_call(owner, {inputs}, single_input_call(owner)).at(0);
}

KerasTensor Layer::operator()(const KerasTensor& inputs) && {
  LayerPtr owner = std::move(*this).moved_into_shared();
  return record_layer_call(owner, {inputs}, single_input_call(owner)).at(0);
}

void Layer::check_built(const char* what) const {
  if (!built_) {
    throw ValueError(str(what, ": layer '", name_, "' has not been built yet; call it on data ",
                         "(or fit it) first so that its weights exist"));
  }
}

Tensor Layer::add_weight(const std::string& name, const Shape& shape,
                         const initializers::InitializerPtr& initializer, bool trainable,
                         std::optional<DType> dtype) {
  if (name.empty() || name.find('/') != std::string::npos) {
    throw ValueError(str("layer '", name_, "': weight name '", name,
                         "' must be non-empty and contain no '/'"));
  }
  for (const Variable& variable : variables_) {
    if (variable.name == name) {
      throw ValueError(str("layer '", name_, "' already has a weight named '", name, "'"));
    }
  }
  if (!initializer) throw ValueError(str("layer '", name_, "': weight '", name, "' has no initializer"));
  std::string full_path = path() + "/" + name;
  Tensor value = create_variable(full_path, shape, dtype.value_or(variable_dtype()), *initializer);
  value.set_name(full_path);
  if (trainable) value.set_requires_grad(true);
  variables_.push_back({name, value, trainable});
  return value;
}

std::vector<Variable*> Layer::variables() {
  std::vector<Variable*> result;
  for (Variable& variable : variables_) result.push_back(&variable);
  for (const LayerPtr& layer : sublayers_) {
    for (Variable* variable : layer->variables()) result.push_back(variable);
  }
  return result;
}

nlohmann::json Layer::get_config() const {
  return {{"name", name_}, {"trainable", trainable_}, {"dtype", config_json::dtype_policy(dtype_policy_)}};
}

nlohmann::json Layer::build_config() const {
  if (build_input_shape_.empty()) return nullptr;
  nlohmann::json shape = nlohmann::json::array();
  for (std::int64_t dimension : build_input_shape_) shape.push_back(dimension < 0 ? nlohmann::json() : nlohmann::json(dimension));
  return {{"input_shape", shape}};
}

std::vector<Variable*> Layer::own_variables() {
  std::vector<Variable*> result;
  for (Variable& variable : variables_) result.push_back(&variable);
  return result;
}

std::vector<SavedSublayer> Layer::saved_sublayers() const {
  std::vector<SavedSublayer> result;
  for (const LayerPtr& layer : sublayers_) result.push_back({layer->name(), layer});
  return result;
}

std::vector<Tensor> Layer::weights() {
  std::vector<Tensor> result;
  for (Variable* variable : variables()) result.push_back(variable->value);
  return result;
}

std::vector<Tensor> Layer::trainable_weights() {
  std::vector<Tensor> result;
  if (!trainable_) return result;
  for (Variable& variable : variables_) {
    if (variable.trainable) result.push_back(variable.value);
  }
  for (const LayerPtr& layer : sublayers_) {
    for (const Tensor& weight : layer->trainable_weights()) result.push_back(weight);
  }
  return result;
}

std::vector<Tensor> Layer::non_trainable_weights() {
  std::vector<Tensor> trainable = trainable_weights();
  std::vector<Tensor> result;
  for (const Tensor& weight : weights()) {
    bool found = false;
    for (const Tensor& other : trainable) found = found || other.same_as(weight);
    if (!found) result.push_back(weight);
  }
  return result;
}

std::int64_t Layer::count_params() {
  // Keras counts the full variables, however they are sharded.
  std::int64_t total = 0;
  for (Variable* variable : variables()) total += shape_size(variable->global_shape());
  return total;
}

bool any_layer_synchronizes_batch(const Layer& root) {
  if (root.synchronizes_batch()) return true;
  for (const LayerPtr& layer : root.layers()) {
    if (any_layer_synchronizes_batch(*layer)) return true;
  }
  return false;
}

}  // namespace keras
