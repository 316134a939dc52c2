// Small helpers shared by the tests: deterministic inputs, closeness checks, and checking that
// a call throws a given exception type whose message contains a phrase.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "keras.h"

namespace keras::testing {

// A functional model with Keras' guide's train_step ("Customizing what happens in fit()"):
// outputs, compute_loss, apply_gradients, compute_metrics. It must train as fit's own step.
class GuideTrainStepModel : public Model {
 public:
  using Model::Model;
  Logs train_step(const StepData& data) override {
    std::vector<Tensor> y_pred = (*this)(data.x, /*training=*/true);
    Tensor loss = compute_loss(data, y_pred);
    apply_gradients(loss);
    return compute_metrics(data, y_pred, loss);
  }
};

inline Tensor random_tensor(const Shape& shape, std::uint64_t seed, DType dtype = float64,
                            double low = -1.0, double high = 1.0) {
  return ops::random({RandomDistribution::uniform, low, high, seed}, shape, dtype);
}

inline void expect_close(const std::vector<double>& actual, const std::vector<double>& expected,
                         double tolerance, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    double scale = std::max(1.0, std::abs(expected[i]));
    EXPECT_LE(std::abs(actual[i] - expected[i]), tolerance * scale)
        << what << " element " << i << ": got " << actual[i] << ", expected " << expected[i];
  }
}

// Three Gaussian blobs in 2-D, labels 0..2: a small problem a model must learn.
struct Blobs {
  Tensor x, y;
};
inline Blobs make_blobs(std::int64_t count, std::uint64_t seed) {
  Tensor labels = ops::cast(ops::random({RandomDistribution::uniform, 0, 3, seed}, {count}, float64), int64);
  Tensor centers = Tensor::from_vector<float>({2, 0, -2, 2, 0, -2}, {3, 2});
  Tensor noise = ops::random({RandomDistribution::normal, 0, 0.5, seed + 1}, {count, 2}, float32);
  return {ops::take(centers, labels, 0) + noise, labels};
}

template <typename Exception, typename Fn>
void expect_throw_with(Fn&& fn, const std::string& phrase) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception containing '" << phrase << "'";
  } catch (const Exception& error) {
    EXPECT_NE(std::string(error.what()).find(phrase), std::string::npos)
        << "message was: " << error.what();
  }
}

}  // namespace keras::testing
