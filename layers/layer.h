// Layer: the unit models are built from, with Keras' naming (dense, dense_1, …), paths
// (sequential/dense_1/kernel), build-on-first-call and add_weight. A layer that owns other
// layers registers them with add_layer, which gives them their place in the path.
#pragma once
#include <concepts>
#include <functional>
#include <memory>
// Only declared here: the full json header costs ~2.3 s of compile time in each of the ~100
// files that include this one (g++ -O2); files that make or read configs include it.
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/initializers.h"
#include "engine/tensor.h"
#include "layers/dtype_policy.h"
#include "layers/keras_tensor.h"

namespace keras::distribution {
struct ShardingContext;
class TensorLayout;
}  // namespace keras::distribution

namespace keras {

class Layer;
class LayerConfig;
using LayerPtr = std::shared_ptr<Layer>;

// A weight of a layer. `value` is the tensor the ops use; its name() is the full path.
struct Variable {
  std::string name;  // short name, e.g. "kernel"
  Tensor value;
  bool trainable = true;
  std::string path() const { return value.name(); }
  // The variable's full shape; `value` holds this process's block of it when the variable is
  // sharded (under ModelParallel), the whole of it otherwise.
  Shape global_shape() const;
  bool sharded() const;
};

// A sublayer's place in Keras' weight files (.weights.h5, saving/keras_weight_layout.h): Keras
// names a layer's sublayers after the Python attribute that holds them ("query_dense"). A null
// `layer` stands for a sublayer Keras has and this engine does not (MultiHeadAttention's
// softmax), written as an empty group whose "vars" carry `empty_name`.
struct SavedSublayer {
  std::string attribute;
  LayerPtr layer;
  std::string empty_name = {};
};

class Layer : public std::enable_shared_from_this<Layer> {
 public:
  // `default_prefix` is the snake_case class name ("dense"); an empty `name` gets a unique
  // one from it, as Keras does.
  Layer(const std::string& default_prefix, const std::string& name);
  virtual ~Layer() = default;
  Layer(Layer&&) = default;
  Layer& operator=(Layer&&) = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  // Builds on the first call (from the input's shape), then runs call(). Under ModelParallel
  // the input is first moved to the data layout unless the layer takes sharded inputs, build()
  // sees the global shape, and the output is moved to the LayoutMap's "<path>/output" layout
  // when there is one (as Keras does).
  Tensor operator()(const Tensor& inputs, bool training = false);
  virtual Tensor call(const Tensor& inputs, bool training) = 0;
  // Keras' functional API (layers/keras_tensor.h): called on a symbolic tensor, the layer is
  // built and the call recorded; the graph keeps the layer alive. A temporary
  // (layers::Dense(64)(inputs)) is moved into the graph; a named layer called more than once
  // (a shared layer) must be held by a std::shared_ptr, which the graph shares.
  KerasTensor operator()(const KerasTensor& inputs) &;
  KerasTensor operator()(const KerasTensor& inputs) &&;
  // This temporary moved into a shared_ptr of its own class, for a graph to own. LayerOf
  // provides it; the default says how to call a layer class without it.
  virtual LayerPtr moved_into_shared() &&;
  // Numbers this layer's calls recorded in graphs (Keras' node index: "dense[1][0]").
  std::size_t record_node() { return recorded_nodes_++; }
  // Creates the weights for inputs of this shape. The default creates none.
  virtual void build(const Shape& input_shape);
  // Whether call() in training runs collectives over the batch axis whose gradients run
  // collectives in the backward pass too (synchronized BatchNormalization): the trainer then
  // keeps its gradient all-reduces out of the backward pass, so that the two never interleave
  // differently on different processes.
  virtual bool synchronizes_batch() const { return false; }
  // Counters of this layer's own random draws (Dropout's call count), for checkpoints that
  // resume training with the randomness an uninterrupted run would have had. Empty for layers
  // that draw nothing; setting counters on such a layer is an error.
  virtual std::vector<std::uint64_t> random_counters() const { return {}; }
  virtual void set_random_counters(const std::vector<std::uint64_t>& counters);

  const std::string& name() const { return name_; }
  // Keras' dtype_policy, compute_dtype and variable_dtype. A layer takes the global policy
  // (mixed_precision::set_global_policy) when it is made; set_dtype_policy is Keras' `dtype`
  // argument and must come before the layer is built (its variables are made in the variable
  // dtype). Layers with sublayers give them the same policy.
  const DTypePolicy& dtype_policy() const { return dtype_policy_; }
  DType compute_dtype() const { return dtype_policy_.compute_dtype(); }
  DType variable_dtype() const { return dtype_policy_.variable_dtype(); }
  virtual void set_dtype_policy(const DTypePolicy& policy);
  // Path of this layer inside its model: "sequential/dense_1"; just the name at top level.
  std::string path() const;
  bool built() const { return built_; }

  // All weights of this layer and its sublayers, in creation order.
  std::vector<Variable*> variables();
  // This layer's own weights (none of its sublayers'), in creation order.
  std::vector<Variable*> own_variables();
  // This layer's sublayers as Keras' weight files name them. The default names each by its
  // own name (a layer of one's own: Keras would use the attribute's name, which C++ cannot
  // see); built-in layers with sublayers give Keras' attribute names.
  virtual std::vector<SavedSublayer> saved_sublayers() const;
  std::vector<Tensor> weights();
  std::vector<Tensor> trainable_weights();
  std::vector<Tensor> non_trainable_weights();
  std::int64_t count_params();
  bool trainable() const { return trainable_; }
  void set_trainable(bool value) { trainable_ = value; }
  const std::vector<LayerPtr>& layers() const { return sublayers_; }
  // Keras' class name for summaries ("Dense", "LayerNormalization"), from the name prefix.
  virtual std::string class_name() const;
  // Keras' get_config(): what a .keras archive's config.json holds to make this layer again
  // (layers/layer_config.h). The default writes name, trainable and dtype, the whole config of
  // a layer without arguments; a layer with arguments adds them, and a class made from
  // configs has a static from_config(LayerConfig&) beside it (saving/layer_registry.h).
  virtual nlohmann::json get_config() const;
  // Keras' build_config: what Keras builds the layer with before loading its weights
  // ({"input_shape": [null, 8]}); null when it has not been built by a call.
  virtual nlohmann::json build_config() const;
  // The output shape of the last call, batch dimension -1 (Keras' None), global under
  // ModelParallel; empty before the first call.
  const Shape& output_shape() const { return output_shape_; }
  // The input shape it was built for by its first call on a tensor (batch dimension -1;
  // Keras' build_config), global under ModelParallel; empty when built otherwise.
  const Shape& build_input_shape() const { return build_input_shape_; }

 protected:
  // Creates a weight named `name` under this layer's path. This is the single place where
  // variables come into being: when the distribution module is active it decides here which
  // part of the variable this process holds (see layers/variable_creation.h).
  // `dtype` defaults to the policy's variable dtype.
  Tensor add_weight(const std::string& name, const Shape& shape,
                    const initializers::InitializerPtr& initializer, bool trainable = true,
                    std::optional<DType> dtype = std::nullopt);
  // Keras' Layer.autocast: on (the default), call() reads variables in the compute dtype. The
  // normalization layers turn it off and compute their statistics in float32, as Keras' do.
  void set_autocast(bool value) { autocast_ = value; }
  // A floating input in the compute dtype, as Keras converts a call's inputs (float64 inputs
  // of a float32 layer are left as they are: the engine's tests compute layers in float64).
  Tensor to_compute_dtype(const Tensor& input) const;
  // The autocast this layer's call installs (nullopt: none).
  std::optional<Autocast> call_autocast() const;
  // Registers a sublayer; its path becomes this layer's path + "/" + its name.
  template <typename L>
    requires std::derived_from<L, Layer>
  std::shared_ptr<L> add_layer(L layer) {
    auto pointer = std::make_shared<L>(std::move(layer));
    track(pointer);
    return pointer;
  }
  template <typename L>
    requires std::derived_from<L, Layer>
  std::shared_ptr<L> add_layer(std::shared_ptr<L> layer) {
    track(layer);
    return layer;
  }
  void track(const LayerPtr& layer);
  // Registers a layer that keeps its own path (a functional model's layers, built before the
  // model existed, are "dense/kernel" as in Keras).
  void track_keeping_path(const LayerPtr& layer);
  // The shared_ptr holding this layer, for a graph to keep it: from the lvalue operator() it
  // must exist (this layer was made by std::make_shared), else a ValueError says what to do.
  LayerPtr shared_for_graph();
  void check_built(const char* what) const;
  // For layers called with several inputs (MultiHeadAttention's query, value, key, mask): runs
  // `body` as operator() runs call() (the layer is then built), moves its output to the
  // LayoutMap's "<path>/output" layout when there is one and notes its shape. The body gets
  // its inputs to whatever layout it needs itself.
  Tensor run_call(const std::function<Tensor()>& body);
  // run_call for a body with several outputs (a model's call_many): each is handed out as a
  // call's output is; the LayoutMap's "<path>/output" applies to single outputs only.
  std::vector<Tensor> run_call_many(const std::function<std::vector<Tensor>()>& body);
  void mark_built() { built_ = true; }

 private:
  // Moves a call's output to "<path>/output"'s layout, when the LayoutMap has one, and notes
  // its (global) shape.
  // (`sharded`: the step context's, null when the distribution does not engage the layers;
  // `layout`: output_layout()'s, looked up once per call.)
  Tensor place_output(Tensor outputs, const distribution::ShardingContext* sharded,
                      const std::shared_ptr<distribution::TensorLayout>& layout);
  // The LayoutMap's layout for "<path>/output", or null.
  std::shared_ptr<distribution::TensorLayout> output_layout(const distribution::ShardingContext& sharded) const;

  std::string name_;
  std::string prefix_;
  std::string parent_path_;
  Shape output_shape_;
  Shape build_input_shape_;
  bool built_ = false;
  std::size_t recorded_nodes_ = 0;
  bool trainable_ = true;
  DTypePolicy dtype_policy_;
  bool autocast_ = true;
  std::vector<Variable> variables_;
  std::vector<LayerPtr> sublayers_;
};

// The base of a layer class whose temporaries can be called on symbolic tensors:
// `class Dense : public LayerOf<Dense>` (or LayerOf<Add, Merge> for another base). It only
// supplies moved_into_shared() for that class.
template <typename Derived, typename Base = Layer>
class LayerOf : public Base {
 public:
  using Base::Base;
  LayerPtr moved_into_shared() && override {
    return std::make_shared<Derived>(std::move(static_cast<Derived&>(*this)));
  }
};

// Accepts a layer by value (moved into a shared_ptr) or as a shared_ptr, so that
// Sequential({layers::Dense(10), my_shared_layer}) reads like Keras.
class AnyLayer {
 public:
  template <typename L>
    requires std::derived_from<L, Layer>
  AnyLayer(L layer) : pointer_(std::make_shared<L>(std::move(layer))) {}
  template <typename L>
    requires std::derived_from<L, Layer>
  AnyLayer(std::shared_ptr<L> layer) : pointer_(std::move(layer)) {}
  const LayerPtr& get() const { return pointer_; }

 private:
  LayerPtr pointer_;
};

// Whether `root` or any layer inside it synchronizes_batch().
bool any_layer_synchronizes_batch(const Layer& root);

// Unique layer names: "dense", then "dense_1", "dense_2", … per prefix.
std::string unique_layer_name(const std::string& prefix);
// Forgets the names handed out and the global distribution (keras.utils.clear_session()).
void clear_session();

}  // namespace keras
