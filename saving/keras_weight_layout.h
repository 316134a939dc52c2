// Where each variable of a model lies in Keras 3's weight files (.weights.h5), found from the
// model's structure as Keras finds it (saving_lib's walk), never from auto-generated names: so a
// second instance of a model (dense_2 where the first had dense) reads the first one's file,
// and a file written by Python Keras reads here. The layout, read from files Keras 3.15 wrote:
//   layers/<name>/vars/<i>   a model's layers, each named by its class in snake_case
//                            ("dense", "dense_1", "re_lu", "input_layer"), numbered per class
//                            in the model's order; a functional model lists its inputs, a
//                            Sequential does not
//   <layer>/<attribute>/...  a layer's sublayers by Keras' attribute names
//                            (layers/multi_head_attention/query_dense/vars/0)
//   vars/<i>                 the model's own variables; each "vars" group has an attribute
//                            "name", the object's name
//   optimizer/vars/<i>       iterations, learning_rate, then the per-variable state; under
//                            LossScaleOptimizer its own first (iteration and learning_rate,
//                            always 0; step_counter and dynamic_scale once built), then the
//                            inner optimizer's, which optimizer/inner_optimizer/vars/<i> holds
//                            again (its "name" the inner optimizer's)
// A layer's own variables are numbered trainable first, then non-trainable (BatchNormalization:
// gamma, beta, moving_mean, moving_variance). The same keys name the tensors of our
// safetensors weight files.
#pragma once
#include <string>
#include <vector>

#include "layers/layer.h"

namespace keras {
class FunctionalGraph;
class Model;
namespace optimizers {
class Optimizer;
}

namespace saving {

// One "vars" group: the object's path ("layers/dense_1"; "" for the model itself), the name
// Keras writes in its attribute, and its own variables in Keras' order.
struct WeightGroup {
  std::string path;
  std::string name;
  std::vector<Variable*> variables;
  // "layers/dense_1/vars/<index>".
  std::string key(std::size_t index) const;
  std::string vars_path() const;
};

// A functional model's layers in Keras' order (its map_graph: by decreasing depth from the
// outputs, ties in the order a walk from the outputs first reaches them), which numbers the
// layers of each class in weight files and orders the optimizer's variables. It differs from
// the order the graph runs them in: for concat([b(x), a2(a1(x))]) Keras has a1, b, a2.
std::vector<LayerPtr> keras_layer_order(const FunctionalGraph& graph);
// Keras' model.trainable_variables: each layer's own, then its sublayers', in Keras' layer
// order, leaving out frozen layers (set_trainable(false)); the optimizer's variables follow it.
std::vector<Variable*> keras_trainable_variables(Model& model);

// Every group of `model`, parents before children, the model's own last as Keras writes it
// (the order does not matter to a reader: groups are found by path).
std::vector<WeightGroup> keras_weight_groups(Model& model);

// The optimizer's variables as Keras orders them: iterations, learning_rate (absent under a
// schedule), the moving averages (use_ema), the gradient sums (gradient_accumulation_steps),
// then each kind of per-variable state in Keras' build order (Adam: momentum and velocity of
// each variable in turn; RMSprop: every velocity, then every momentum, then every average
// gradient). One entry per tensor in the file. With loss scaling on, Keras'
// LossScaleOptimizer's own variables come first: its iteration and learning_rate (it never
// steps itself: 0 and 0.0, read and ignored) and, once built (with_state), step_counter
// (finite steps in a row) and dynamic_scale (the loss scale).
struct OptimizerEntry {
  enum class Kind {
    loss_scale_optimizer_iterations,
    loss_scale_optimizer_learning_rate,
    loss_scale_step_counter,
    loss_scale,
    iterations,
    learning_rate,
    average,
    accumulated,
    slot
  } kind;
  Variable* variable = nullptr;  // the model's variable it belongs to (average .. slot)
  int slot = -1;                 // the optimizer's slot index (slot)
};
// Empty per-variable part when the optimizer has not made its state yet (Keras' unbuilt
// optimizer: iterations and learning_rate only).
std::vector<OptimizerEntry> keras_optimizer_entries(const optimizers::Optimizer& optimizer,
                                                    const std::vector<Variable*>& trainable,
                                                    bool with_state);

}  // namespace saving
}  // namespace keras
