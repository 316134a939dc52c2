// The convnet of Keras' "multi-GPU distributed training with JAX" guide
// (keras.io/guides/distributed_training_with_jax), layer for layer, shared by
// examples/fashion_mnist (--model cnn) and benchmarks/convnet_step: raw pixels in, Rescaling
// to [0, 1], three convolutions with BatchNormalization (no scale) and ReLU, global average
// pooling, a 256-unit Dense with Dropout 0.5, 10 logits. `synchronized` makes the
// normalisations use the global batch's statistics under a distribution (BatchNormalization).
#pragma once
#include "keras.h"

namespace guide_convnet {

inline keras::Sequential make(bool synchronized = false) {
  namespace layers = keras::layers;
  auto batch_norm = [&] {
    layers::BatchNormalizationOptions options;
    options.scale = false;
    options.synchronized = synchronized;
    return layers::BatchNormalization(options);
  };
  auto conv = [](std::int64_t stride, const char* padding, bool use_bias, const char* name) {
    layers::Conv2DOptions options;
    options.strides = {stride};
    options.padding = padding;
    options.use_bias = use_bias;
    options.name = name;
    return options;
  };
  return keras::Sequential({
      layers::Rescaling(1.0 / 255.0),
      layers::Conv2D(12, {3}, conv(1, "same", false, "")),
      batch_norm(),
      layers::ReLU(),
      layers::Conv2D(24, {6}, conv(2, "valid", false, "")),
      batch_norm(),
      layers::ReLU(),
      layers::Conv2D(32, {6}, conv(2, "same", true, "large_k")),
      batch_norm(),
      layers::ReLU(),
      layers::GlobalAveragePooling2D(),
      layers::Dense(256, "relu"),
      layers::Dropout(0.5),
      layers::Dense(10),
  });
}

// Multiply-adds of one image's forward pass through the built model's Conv2D and Dense layers
// (the rest is element-wise): output pixels x window x input channels per group x filters, and
// inputs x units. A training step is about 3x this per image (forward, input and weight
// gradients), 2 FLOPs each.
inline double forward_multiply_adds(keras::Sequential& model) {
  double total = 0;
  for (const keras::LayerPtr& layer : model.layers()) {
    if (auto* conv = dynamic_cast<keras::layers::Conv2D*>(layer.get())) {
      const keras::Shape& out = conv->output_shape();
      const keras::Shape& kernel = conv->kernel().shape();
      total += double(out[1] * out[2]) * double(kernel[0] * kernel[1] * kernel[2] * kernel[3]);
    } else if (auto* dense = dynamic_cast<keras::layers::Dense*>(layer.get())) {
      total += double(dense->kernel().dim(0) * dense->kernel().dim(1));
    }
  }
  return total;
}

}  // namespace guide_convnet
