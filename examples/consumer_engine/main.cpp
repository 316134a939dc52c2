// Tensors, autograd and an optimizer from keras::engine alone: fits y = 3x - 1 by gradient
// descent and checks the answer. Exit 0 when both parameters are within 1e-3.
#include <cmath>
#include <cstdio>

#include <keras/engine/ops.h>
#include <keras/engine/optimizers.h>
#include <keras/engine/tensor.h>
#include <keras/engine/version.h>

int main() {
  keras::Tensor x = keras::ops::random({keras::RandomDistribution::uniform, -1, 1, 1}, {64, 1});
  keras::Tensor y = x * 3.0 - 1.0;
  keras::Tensor w = keras::Tensor::zeros({1, 1});
  keras::Tensor b = keras::Tensor::zeros({1});
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  keras::optimizers::SGD sgd(0.5);
  for (int step = 0; step < 200; ++step) {
    keras::Tensor error = keras::ops::matmul(x, w) + b - y;
    keras::Tensor loss = keras::ops::mean(error * error);
    loss.backward();
    sgd.apply({w, b}, {w.grad(), b.grad()});
    w.zero_grad();
    b.zero_grad();
  }
  double slope = w.item(), intercept = b.item();
  std::printf("keras-cpp %s engine alone: y = %.4f x + %.4f\n", keras::version().c_str(), slope,
              intercept);
  return std::abs(slope - 3.0) < 1e-3 && std::abs(intercept + 1.0) < 1e-3 ? 0 : 1;
}
