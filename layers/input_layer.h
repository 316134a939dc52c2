// keras.layers.InputLayer: the layer behind keras::Input (layers/keras_tensor.h). It has no
// weights and hands its input on; it is there so that a functional model lists its inputs among
// its layers and summary() names them, as Keras does.
#pragma once
#include "layers/layer.h"

namespace keras::layers {

class InputLayer : public LayerOf<InputLayer> {
 public:
  nlohmann::json get_config() const override;
  static LayerPtr from_config(LayerConfig& config);
  InputLayer(Shape shape, DType dtype, const std::string& name = "");
  Tensor call(const Tensor& inputs, bool training) override;
  std::string class_name() const override { return "InputLayer"; }
  // The shape given to keras::Input, without the batch dimension.
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }

 private:
  Shape shape_;
  DType dtype_;
};

}  // namespace keras::layers
