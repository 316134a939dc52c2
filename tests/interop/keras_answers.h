// What the interop tools (attention_tool, convolution_tool) share: the file of Keras' weights,
// inputs and answers that the Python side wrote, read by name; and how a tensor of ours is
// compared with Keras': the largest difference relative to the larger of 1 and Keras' value,
// printed to stderr (naming `what`) when it is above the tools' 1e-5 tolerance.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "keras.h"

namespace interop {

constexpr double kTolerance = 1e-5;

class KerasAnswers {
 public:
  explicit KerasAnswers(const std::string& path) : path_(path) {
    for (auto& [name, tensor] : keras::io::load_safetensors(path)) tensors_[name] = tensor;
  }
  // The tensor `name`; a ValueError naming the file when it has none.
  const keras::Tensor& operator()(const std::string& name) const {
    auto found = tensors_.find(name);
    if (found == tensors_.end()) throw keras::ValueError(keras::str("'", path_, "' has no tensor '", name, "'"));
    return found->second;
  }

 private:
  std::string path_;
  std::map<std::string, keras::Tensor> tensors_;
};

inline double worst_error(const keras::Tensor& actual, const keras::Tensor& expected, const std::string& what) {
  if (actual.shape() != expected.shape()) {
    throw keras::ShapeError(keras::str(what, ": ours has shape ", keras::shape_to_string(actual.shape()),
                                       ", Keras' ", keras::shape_to_string(expected.shape())));
  }
  std::vector<double> ours = actual.to_vector<double>(), theirs = expected.to_vector<double>();
  double worst = 0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    worst = std::max(worst, std::abs(ours[i] - theirs[i]) / std::max(1.0, std::abs(theirs[i])));
  }
  if (worst > kTolerance) std::fprintf(stderr, "%s differs from Keras' by %.2e\n", what.c_str(), worst);
  return worst;
}

}  // namespace interop
