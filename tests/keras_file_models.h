// The four models whose files travel between Python Keras and keras-cpp, layer for layer as
// tests/interop/keras_file_models.py builds them in Keras 3: an MLP, the guide's convnet
// (examples/fashion_mnist/guide_convnet.h), a functional model with two inputs, a small
// transformer block and branches whose Keras order differs from their running order. Shared by tests/keras_files_test.cpp (Keras' files loaded here) and
// tests/interop/keras_files_tool.cpp (our files loaded by Keras).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "examples/fashion_mnist/guide_convnet.h"
#include "keras.h"

namespace keras::testing {

inline const std::vector<std::string> kKerasFileModels = {"mlp", "convnet", "two_inputs",
                                                          "transformer_block", "branches"};

inline std::shared_ptr<Model> make_keras_file_model(const std::string& name) {
  if (name == "mlp") {
    auto model = std::make_shared<Sequential>(std::vector<AnyLayer>{layers::Dense(16, "relu"), layers::Dense(4)});
    (*model)(Tensor::zeros({1, 8}));
    return model;
  }
  if (name == "convnet") {
    auto model = std::make_shared<Sequential>(guide_convnet::make());
    (*model)(Tensor::zeros({1, 28, 28, 1}));
    return model;
  }
  if (name == "two_inputs") {
    KerasTensor a = Input({8}, "a");
    KerasTensor b = Input({4}, "b");
    KerasTensor x = layers::Concatenate()({layers::Dense(8, "tanh")(a), b});
    return std::make_shared<Model>(std::vector<KerasTensor>{a, b}, layers::Dense(3)(x));
  }
  if (name == "transformer_block") {
    KerasTensor t = Input({5, 8});
    KerasTensor h = layers::MultiHeadAttention(2, 4)(t);
    h = layers::LayerNormalization()(layers::Add()({t, h}));
    KerasTensor f = layers::Dense(8)(layers::Dense(16, "relu")(h));
    return std::make_shared<Model>(t, layers::LayerNormalization()(layers::Add()({h, f})));
  }
  if (name == "branches") {
    // Runs B1, A1, A2; Keras numbers them A1 (dense), B1 (dense_1), A2 (dense_2).
    KerasTensor x = Input({6});
    KerasTensor b1 = layers::Dense(4, "relu")(x);
    KerasTensor a2 = layers::Dense(3, "relu")(layers::Dense(5, "relu")(x));
    return std::make_shared<Model>(x, layers::Dense(2)(layers::Concatenate()({b1, a2})));
  }
  throw ValueError(str("no model '", name, "' among the Keras file models"));
}

}  // namespace keras::testing
