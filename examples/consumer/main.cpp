// Trains a small classifier on synthetic data with an installed keras-cpp and checks that it
// learned: the out-of-tree smoke test of find_package(keras). Exit 0 when the accuracy clears 0.9.
#include <cstdio>

#include <keras/keras.h>

int main() {
  keras::distribution::initialize();
  keras::set_random_seed(7);
  // Two Gaussian blobs, one per class, in 8 dimensions.
  const std::int64_t samples = 512, features = 8;
  keras::Tensor coin = keras::ops::random({.seed = 1}, {samples});
  keras::Tensor labels =
      keras::ops::cast(keras::ops::greater(coin, keras::Tensor::scalar(0.5)), keras::int64);
  keras::Tensor centres =
      keras::ops::expand_dims(keras::ops::cast(labels, keras::float32), 1) * 2.0 - 1.0;
  keras::Tensor noise = keras::ops::random(
      {.distribution = keras::RandomDistribution::normal, .a = 0.0, .b = 1.0, .seed = 2},
      {samples, features});
  keras::Tensor x = noise + centres;

  keras::Sequential model({keras::layers::Dense(16, "relu"), keras::layers::Dense(2)});
  model.compile(keras::optimizers::Adam(1e-2),
                keras::losses::SparseCategoricalCrossentropy(/*from_logits=*/true), {"accuracy"});
  model.fit(x, labels, {.batch_size = 64, .epochs = 5, .verbose = 0});
  auto results = model.evaluate(x, labels, {.verbose = 0});
  std::printf("keras-cpp %s (headers %s): accuracy %.3f\n", keras::version().c_str(),
              KERAS_VERSION_STRING, results["accuracy"]);
  return results["accuracy"] > 0.9 ? 0 : 1;
}
