// The merging layers (see the header).
#include "layers/merging.h"

#include "layers/layer_config.h"

#include <cstdint>

#include "engine/errors.h"
#include "engine/ops.h"

namespace keras::layers {

Tensor Merge::call(const Tensor&, bool) {
  throw ValueError(str(class_name(), " '", name(), "' merges a list of tensors and was given one; call it with a ",
                       "list: ", name(), "({x, y})"));
}

Tensor Merge::operator()(const std::vector<Tensor>& inputs, bool) {
  if (inputs.size() < minimum_inputs() || inputs.size() > maximum_inputs()) {
    throw ValueError(str(class_name(), " '", name(), "' takes ",
                         maximum_inputs() == minimum_inputs() ? str("exactly ", minimum_inputs())
                         : maximum_inputs() == SIZE_MAX       ? str("at least ", minimum_inputs())
                                                              : str(minimum_inputs(), " to ", maximum_inputs()),
                         " inputs, got ", inputs.size()));
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) throw ValueError(str(class_name(), " '", name(), "': input ", i, " is undefined"));
  }
  return run_call([&] { return merge(inputs); });
}

KerasTensor Merge::record(const LayerPtr& owner, const std::vector<KerasTensor>& inputs) {
  auto* layer = static_cast<Merge*>(owner.get());
  return record_layer_call(owner, inputs, [layer](const std::vector<Tensor>& values, bool training) {
           return std::vector<Tensor>{(*layer)(values, training)};
         }).at(0);
}

KerasTensor Merge::operator()(const std::vector<KerasTensor>& inputs) & { return record(shared_for_graph(), inputs); }

KerasTensor Merge::operator()(const std::vector<KerasTensor>& inputs) && {
  return record(std::move(*this).moved_into_shared(), inputs);
}

namespace {
// Element-wise merges broadcast as numpy does (Keras' merging layers too); an input that does
// not is an error naming the layer and the input.
Tensor fold(const Layer& layer, const std::vector<Tensor>& inputs, Tensor (*op)(const Tensor&, const Tensor&)) {
  Tensor result = inputs[0];
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    try {
      result = op(result, inputs[i]);
    } catch (const ShapeError& error) {
      throw ShapeError(str(layer.class_name(), " '", layer.name(), "': input ", i, " has shape ",
                           shape_to_string(inputs[i].shape()), ", which does not broadcast with input 0's ",
                           shape_to_string(inputs[0].shape()), " (", error.what(), ")"));
    }
  }
  return result;
}
}  // namespace

Add::Add(const std::string& name) : LayerOf("add", name) {}
Tensor Add::merge(const std::vector<Tensor>& inputs) { return fold(*this, inputs, ops::add); }

Subtract::Subtract(const std::string& name) : LayerOf("subtract", name) {}
Tensor Subtract::merge(const std::vector<Tensor>& inputs) { return ops::subtract(inputs[0], inputs[1]); }

Multiply::Multiply(const std::string& name) : LayerOf("multiply", name) {}
Tensor Multiply::merge(const std::vector<Tensor>& inputs) { return fold(*this, inputs, ops::multiply); }

Average::Average(const std::string& name) : LayerOf("average", name) {}
Tensor Average::merge(const std::vector<Tensor>& inputs) {
  return fold(*this, inputs, ops::add) * (1.0 / static_cast<double>(inputs.size()));
}

Maximum::Maximum(const std::string& name) : LayerOf("maximum", name) {}
Tensor Maximum::merge(const std::vector<Tensor>& inputs) { return fold(*this, inputs, ops::maximum); }

Minimum::Minimum(const std::string& name) : LayerOf("minimum", name) {}
Tensor Minimum::merge(const std::vector<Tensor>& inputs) { return fold(*this, inputs, ops::minimum); }

Concatenate::Concatenate(std::int64_t axis, const std::string& name) : LayerOf("concatenate", name), axis_(axis) {}

Tensor Concatenate::merge(const std::vector<Tensor>& inputs) {
  if (inputs.size() == 1) return inputs[0];
  const Shape first = inputs[0].shape();
  auto rank = static_cast<std::int64_t>(first.size());
  std::int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
  if (axis < 0 || axis >= rank) {
    throw ValueError(str("Concatenate '", name(), "': axis ", axis_, " is out of range for inputs of rank ", rank));
  }
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    Shape shape = inputs[i].shape();
    bool fits = shape.size() == first.size();
    for (std::size_t d = 0; fits && d < shape.size(); ++d) {
      fits = static_cast<std::int64_t>(d) == axis || shape[d] == first[d];
    }
    if (!fits) {
      throw ShapeError(str("Concatenate '", name(), "' joins along axis ", axis_, " inputs that agree elsewhere; input ",
                           i, " has shape ", shape_to_string(shape), ", input 0 ", shape_to_string(first)));
    }
  }
  return ops::concatenate(inputs, axis);
}

Dot::Dot(std::int64_t axes, bool normalize, const std::string& name) : Dot(axes, axes, normalize, name) {}

Dot::Dot(std::int64_t first_axis, std::int64_t second_axis, bool normalize, const std::string& name)
    : LayerOf("dot", name), first_axis_(first_axis), second_axis_(second_axis), normalize_(normalize) {}

namespace {
Tensor l2_normalized(const Tensor& x, std::int64_t axis) {
  // keras.ops.normalize: x / sqrt(max(sum(x^2), epsilon)), epsilon 1e-12.
  Tensor squares = ops::sum(ops::square(x), {axis}, true);
  return x * ops::rsqrt(ops::maximum(squares, ops::scalar_like(squares, 1e-12)));
}
}  // namespace

Tensor Dot::merge(const std::vector<Tensor>& inputs) {
  const Tensor& x = inputs[0];
  const Tensor& y = inputs[1];
  auto x_rank = static_cast<std::int64_t>(x.shape().size());
  auto y_rank = static_cast<std::int64_t>(y.shape().size());
  if (x_rank < 2 || y_rank < 2 || x_rank + y_rank > 26) {
    throw ShapeError(str("Dot '", name(), "' takes two batches of rank 2 or more, got shapes ",
                         shape_to_string(x.shape()), " and ", shape_to_string(y.shape())));
  }
  std::int64_t x_axis = first_axis_ < 0 ? first_axis_ + x_rank : first_axis_;
  std::int64_t y_axis = second_axis_ < 0 ? second_axis_ + y_rank : second_axis_;
  if (x_axis <= 0 || x_axis >= x_rank || y_axis <= 0 || y_axis >= y_rank) {
    throw ValueError(str("Dot '", name(), "': axes (", first_axis_, ", ", second_axis_, ") must name a dimension ",
                         "other than the batch of inputs of rank ", x_rank, " and ", y_rank));
  }
  if (x.shape()[x_axis] != y.shape()[y_axis]) {
    throw ShapeError(str("Dot '", name(), "': dimension ", x_axis, " of ", shape_to_string(x.shape()),
                         " and dimension ", y_axis, " of ", shape_to_string(y.shape()), " differ"));
  }
  Tensor left = normalize_ ? l2_normalized(x, x_axis) : x;
  Tensor right = normalize_ ? l2_normalized(y, y_axis) : y;
  // batch_dot as one einsum: 'a' the batch, 'z' the contracted letter, the rest free.
  std::string x_letters = "a", y_letters = "a", output = "a";
  char next = 'b';
  for (std::int64_t d = 1; d < x_rank; ++d) {
    char letter = d == x_axis ? 'z' : next++;
    x_letters += letter;
    if (letter != 'z') output += letter;
  }
  for (std::int64_t d = 1; d < y_rank; ++d) {
    char letter = d == y_axis ? 'z' : next++;
    y_letters += letter;
    if (letter != 'z') output += letter;
  }
  Tensor result = ops::einsum(str(x_letters, ",", y_letters, "->", output), left, right);
  if (result.shape().size() == 1) result = ops::expand_dims(result, 1);
  return result;
}


LayerPtr Add::from_config(LayerConfig& config) { return std::make_shared<Add>(config.name()); }


LayerPtr Subtract::from_config(LayerConfig& config) { return std::make_shared<Subtract>(config.name()); }


LayerPtr Multiply::from_config(LayerConfig& config) { return std::make_shared<Multiply>(config.name()); }


LayerPtr Average::from_config(LayerConfig& config) { return std::make_shared<Average>(config.name()); }


LayerPtr Maximum::from_config(LayerConfig& config) { return std::make_shared<Maximum>(config.name()); }


LayerPtr Minimum::from_config(LayerConfig& config) { return std::make_shared<Minimum>(config.name()); }


nlohmann::json Concatenate::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["axis"] = axis_;
  return config;
}

LayerPtr Concatenate::from_config(LayerConfig& config) {
  std::string name = config.name();
  return std::make_shared<Concatenate>(config.integer("axis", -1), name);
}

}  // namespace keras::layers
