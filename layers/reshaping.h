// Keras' layers that only move or repeat values: Identity, Permute, RepeatVector, and Lambda
// (a C++ callable as a layer). Flatten and Reshape live in basic_layers.h. Their ops follow the
// sharding rules (transpose, broadcast) like any layer's.
#pragma once
#include <functional>
#include <vector>

#include "layers/layer.h"

namespace keras::layers {

// Hands its input on (keras.layers.Identity): a named place in a graph.
class Identity : public LayerOf<Identity> {
 public:
  explicit Identity(const std::string& name = "");
  Tensor call(const Tensor& inputs, bool training) override;
};

// Permutes the non-batch axes: dims is a permutation of 1..rank-1 (1-based, as in Keras), so
// Permute({2, 1}) turns (batch, a, b) into (batch, b, a).
class Permute : public LayerOf<Permute> {
 public:
  explicit Permute(std::vector<std::int64_t> dims, const std::string& name = "");
  Tensor call(const Tensor& inputs, bool training) override;

 private:
  std::vector<std::int64_t> dims_;
};

// (batch, features) -> (batch, n, features): each sample's vector n times.
class RepeatVector : public LayerOf<RepeatVector> {
 public:
  explicit RepeatVector(std::int64_t n, const std::string& name = "");
  Tensor call(const Tensor& inputs, bool training) override;

 private:
  std::int64_t n_;
};

// keras.layers.Lambda: a function of the input, written with ops, as a layer. It has no
// weights (write a Layer for those, as Keras advises).
class Lambda : public LayerOf<Lambda> {
 public:
  using Function = std::function<Tensor(const Tensor&)>;
  explicit Lambda(Function function, const std::string& name = "");
  Tensor call(const Tensor& inputs, bool training) override;

 private:
  Function function_;
};

}  // namespace keras::layers
