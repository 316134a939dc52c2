// The model-parallel table's shape, shared by the files that add rows to it: a case is a model,
// a mesh sized from the job and a LayoutMap; model_parallel_tests.cpp trains each case on one
// process and under ModelParallel and compares (see its opening). The MLP rows live there, the
// transformer rows in transformer_parallel_cases.cpp, the convolution rows in
// convolution_parallel_cases.cpp, the custom-layer rows in custom_layer_parallel_cases.cpp.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "keras.h"

namespace keras::model_parallel_table {

namespace kd = keras::distribution;

struct Case {
  std::string name;
  // Mesh shape and axis names for a job of `processes` processes.
  std::function<kd::DeviceMesh(int processes)> mesh;
  std::function<void(kd::LayoutMap&)> layouts;
  std::function<std::shared_ptr<Model>()> model;
  bool integer_inputs = false;          // token ids in [0, 24), shape (batch, 4)
  std::string batch_dim_name = "";      // "": the mesh's first axis, as in Keras
  Shape image_shape = {};               // non-empty: inputs are (batch, height, width, channels) images
  // The optimizer; null: Adam(0.01).
  std::function<std::shared_ptr<optimizers::Optimizer>()> optimizer = nullptr;
};

inline void PrintTo(const Case& test, std::ostream* out) { *out << test.name; }

inline int size() { return kd::num_processes(); }
inline layers::DenseOptions named(const std::string& name) {
  layers::DenseOptions options;
  options.name = name;
  return options;
}
inline kd::DeviceMesh model_axis(int processes) { return kd::DeviceMesh({1, processes}, {"batch", "model"}); }
inline kd::DeviceMesh batch_by_model(int processes) { return kd::DeviceMesh({2, processes / 2}, {"batch", "model"}); }

constexpr int kSteps = 5;
constexpr std::int64_t kBatch = 8;

// The transformer rows (transformer_parallel_cases.cpp).
std::vector<Case> transformer_cases();
// The convolution rows (convolution_parallel_cases.cpp).
std::vector<Case> convolution_cases();
// The custom-layer rows: user layers of plain ops (custom_layer_parallel_cases.cpp).
std::vector<Case> custom_layer_cases();

}  // namespace keras::model_parallel_table
