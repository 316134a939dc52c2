// The keras-cpp half of check_keras_attention.py: loads a file of Keras' MultiHeadAttention
// weights, inputs and answers, builds ours with the same configuration and weights, and
// compares its output and gradients (of the inputs and of every weight, for sum(output *
// probe)) within 1e-5 of the largest of 1 and the expected value. Prints one line; exit 1 on a
// mismatch.
//   attention_tool FILE.safetensors HEADS KEY_DIM VALUE_DIM MASKED CAUSAL
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "keras.h"
#include "tests/interop/keras_answers.h"

using interop::worst_error;

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: attention_tool FILE.safetensors HEADS KEY_DIM VALUE_DIM MASKED CAUSAL\n");
    return 2;
  }
  try {
    const interop::KerasAnswers tensor(argv[1]);
    const bool masked = std::string(argv[5]) == "1", causal = std::string(argv[6]) == "1";
    keras::layers::MultiHeadAttentionOptions options;
    options.value_dim = std::stoll(argv[4]);
    options.name = "mha";
    keras::layers::MultiHeadAttention attention(std::stoll(argv[2]), std::stoll(argv[3]), options);
    keras::Tensor query = tensor("query").clone(), value = tensor("value").clone();
    keras::Tensor mask = masked ? tensor("mask") : keras::Tensor();
    {
      keras::NoGradGuard building;
      attention(query, causal ? query : value, keras::Tensor(), mask, causal);
    }
    for (keras::Variable* variable : attention.variables()) variable->value.assign(tensor(variable->path()));
    query.set_requires_grad(true);
    if (!causal) value.set_requires_grad(true);
    keras::Tensor output = attention(query, causal ? query : value, keras::Tensor(), mask, causal);
    keras::ops::sum(output * tensor("probe")).backward();
    double worst = worst_error(output, tensor("output"), "output");
    worst = std::max(worst, worst_error(query.grad(), tensor("grad/query"), "grad/query"));
    if (!causal) worst = std::max(worst, worst_error(value.grad(), tensor("grad/value"), "grad/value"));
    int compared = 0;
    for (keras::Variable* variable : attention.variables()) {
      worst = std::max(worst, worst_error(variable->value.grad(), tensor("grad/" + variable->path()),
                                          "grad/" + variable->path()));
      ++compared;
    }
    std::printf("output, input gradients and %d weight gradients agree with Keras within %.2e (relative, "
                "tolerance 1e-5)\n", compared, worst);
    return worst <= interop::kTolerance ? 0 : 1;
  } catch (const keras::Error& error) {
    std::fprintf(stderr, "attention_tool: %s\n", error.what());
    return 1;
  }
}
