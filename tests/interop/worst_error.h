// How the interop tools (attention_tool, convolution_tool) compare a tensor of ours with
// Keras': the largest difference relative to the larger of 1 and Keras' value, printed to
// stderr (naming `what`) when it is above the tools' 1e-5 tolerance.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "keras.h"

namespace interop {

constexpr double kTolerance = 1e-5;

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
