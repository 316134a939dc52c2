// The reshaping layers (see the header).
#include "layers/reshaping.h"

#include <algorithm>

#include "engine/errors.h"
#include "engine/ops.h"

namespace keras::layers {

Identity::Identity(const std::string& name) : LayerOf("identity", name) {}

Tensor Identity::call(const Tensor& inputs, bool) { return inputs; }

Permute::Permute(std::vector<std::int64_t> dims, const std::string& name)
    : LayerOf("permute", name), dims_(std::move(dims)) {
  std::vector<std::int64_t> sorted = dims_;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] != static_cast<std::int64_t>(i) + 1) {
      std::string given;
      for (std::int64_t dim : dims_) given += (given.empty() ? "" : ", ") + std::to_string(dim);
      throw ValueError(str("Permute: dims (", given, ") must be a permutation of 1..", dims_.size(),
                           " (the batch axis 0 stays first)"));
    }
  }
}

Tensor Permute::call(const Tensor& inputs, bool) {
  if (inputs.rank() != static_cast<std::int64_t>(dims_.size()) + 1) {
    throw ShapeError(str("Permute '", name(), "' permutes ", dims_.size(), " axes after the batch, but its input has shape ",
                         shape_to_string(inputs.shape())));
  }
  std::vector<std::int64_t> permutation = {0};
  permutation.insert(permutation.end(), dims_.begin(), dims_.end());
  return ops::transpose(inputs, permutation);
}

RepeatVector::RepeatVector(std::int64_t n, const std::string& name) : LayerOf("repeat_vector", name), n_(n) {
  if (n < 1) throw ValueError(str("RepeatVector: n must be >= 1, got ", n));
}

Tensor RepeatVector::call(const Tensor& inputs, bool) {
  if (inputs.rank() != 2) {
    throw ShapeError(str("RepeatVector '", name(), "' takes (batch, features), got shape ",
                         shape_to_string(inputs.shape())));
  }
  Shape shape = inputs.shape();
  return ops::broadcast_to(ops::expand_dims(inputs, 1), {shape[0], n_, shape[1]});
}

Lambda::Lambda(Function function, const std::string& name) : LayerOf("lambda", name), function_(std::move(function)) {
  if (!function_) throw ValueError("Lambda: the function is empty");
}

Tensor Lambda::call(const Tensor& inputs, bool) {
  Tensor outputs = function_(inputs);
  if (!outputs.defined()) throw ValueError(str("Lambda '", name(), "': the function returned an undefined tensor"));
  return outputs;
}

}  // namespace keras::layers
