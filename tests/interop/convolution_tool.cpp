// The keras-cpp half of check_keras_convolution.py: loads a file of Keras' Conv2D and
// BatchNormalization weights, inputs and answers, builds ours with the same configuration and
// weights, and compares the training output, the gradients (of the input and of every weight,
// for sum(output * probe)), the updated moving statistics, the inference output after them, and
// max / average pooling with their input gradients, within 1e-5 of the largest of 1 and the
// expected value. Prints one line; exit 1 on a mismatch.
//   convolution_tool FILE.safetensors FILTERS KERNEL_H KERNEL_W STRIDES PADDING DILATION GROUPS USE_BIAS
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "keras.h"
#include "tests/interop/keras_answers.h"

using interop::worst_error;

int main(int argc, char** argv) {
  if (argc != 10) {
    std::fprintf(stderr, "usage: convolution_tool FILE.safetensors FILTERS KERNEL_H KERNEL_W STRIDES PADDING "
                         "DILATION GROUPS USE_BIAS\n");
    return 2;
  }
  try {
    const interop::KerasAnswers tensor(argv[1]);
    namespace layers = keras::layers;
    layers::Conv2DOptions options;
    options.strides = {std::stoll(argv[5])};
    options.padding = argv[6];
    options.dilation_rate = {std::stoll(argv[7])};
    options.groups = std::stoll(argv[8]);
    options.use_bias = std::string(argv[9]) == "1";
    options.name = "conv";
    layers::Conv2D conv(std::stoll(argv[2]), {std::stoll(argv[3]), std::stoll(argv[4])}, options);
    layers::BatchNormalizationOptions norm_options;
    norm_options.momentum = 0.9;
    norm_options.name = "norm";
    layers::BatchNormalization norm(norm_options);
    keras::Tensor x = tensor("x").clone();
    {
      keras::NoGradGuard building;
      norm(conv(x));
    }
    for (keras::Layer* layer : {static_cast<keras::Layer*>(&conv), static_cast<keras::Layer*>(&norm)}) {
      for (keras::Variable* variable : layer->variables()) variable->value.assign(tensor(variable->path()));
    }
    x.set_requires_grad(true);
    keras::Tensor hidden = conv(x, /*training=*/true);
    keras::Tensor output = norm(hidden, /*training=*/true);
    keras::ops::sum(output * tensor("probe")).backward();
    double worst = worst_error(output, tensor("output"), "output");
    worst = std::max(worst, worst_error(x.grad(), tensor("grad/x"), "grad/x"));
    int compared = 0;
    for (keras::Layer* layer : {static_cast<keras::Layer*>(&conv), static_cast<keras::Layer*>(&norm)}) {
      for (keras::Variable* variable : layer->variables()) {
        if (variable->trainable) {
          worst = std::max(worst, worst_error(variable->value.grad(), tensor("grad/" + variable->path()),
                                              "grad/" + variable->path()));
        } else {
          worst = std::max(worst, worst_error(variable->value, tensor("updated/" + variable->path()),
                                              "updated/" + variable->path()));
        }
        ++compared;
      }
    }
    {
      keras::NoGradGuard inference;
      worst = std::max(worst, worst_error(norm(hidden.detach(), /*training=*/false), tensor("inference"),
                                          "inference"));
    }
    for (const std::string kind : {"max", "average"}) {
      keras::Tensor images = tensor("x").clone().set_requires_grad(true);
      keras::Tensor pooled = kind == "max" ? keras::ops::max_pool(images, {3}, {2}, "same")
                                           : keras::ops::average_pool(images, {3}, {2}, "same");
      keras::ops::sum(pooled * tensor("pool/" + kind + "/probe")).backward();
      worst = std::max(worst, worst_error(pooled, tensor("pool/" + kind + "/output"), kind + " pool"));
      worst = std::max(worst, worst_error(images.grad(), tensor("pool/" + kind + "/grad"), kind + " pool gradient"));
    }
    std::printf("training output, input gradient, %d weights (gradients, updated moving statistics), inference "
                "and pooling agree with Keras within %.2e (relative, tolerance 1e-5)\n",
                compared, worst);
    return worst <= interop::kTolerance ? 0 : 1;
  } catch (const keras::Error& error) {
    std::fprintf(stderr, "convolution_tool: %s\n", error.what());
    return 1;
  }
}
