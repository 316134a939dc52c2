// Bad input answered honestly: sizes that overflow, integer edge cases that trap in
// C++, NaN that must not be masked, and environment values out of range. Each test here failed
// (crashed, or gave a wrong answer) before the fix it covers.
#include <climits>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "engine/environment.h"
#include "tests/test_helpers.h"

namespace keras {
namespace {

using keras::testing::expect_throw_with;

TEST(Sizes, ShapesWhoseSizeOverflowsAreShapeErrors) {
  // 2^62 float32 elements are 2^64 bytes: the byte count wrapped to 0, then fill wrote.
  expect_throw_with<ShapeError>([] { Tensor::zeros({std::int64_t{1} << 62}); },
                                "needs more bytes than fit in 64 bits");
  // 2^32 * 2^32 wrapped to an element count of 0; slicing it read out of bounds.
  expect_throw_with<ShapeError>(
      [] { Tensor::zeros({std::int64_t{1} << 32, std::int64_t{1} << 32}); },
      "(4294967296, 4294967296) has more elements than fit");
  // 3037000500^2 is just above 2^63: the size came out negative.
  expect_throw_with<ShapeError>([] { Tensor::zeros({3037000500, 3037000500}); },
                                "has more elements than fit");
  // No elements, but row-major strides of 2^62 * 2^62 would still overflow.
  expect_throw_with<ShapeError>(
      [] { Tensor::zeros({0, std::int64_t{1} << 62, std::int64_t{1} << 62}); },
      "has more elements than fit");
  EXPECT_EQ(Tensor::zeros({0, std::int64_t{1} << 40}).size(), 0);
  EXPECT_EQ(checked_shape_size({3037000499, 3037000499}), 3037000499LL * 3037000499LL);
}

TEST(Sizes, AFailedAllocationIsAKerasError) {
  // 2^50 bytes (1 PiB) passes every size check but no machine can give it.
  try {
    Tensor::empty({std::int64_t{1} << 50}, uint8);
    ADD_FAILURE() << "allocating 1 PiB succeeded";
  } catch (const Error& error) {
    EXPECT_NE(dynamic_cast<const OutOfMemoryError*>(&error), nullptr) << error.what();
    EXPECT_NE(std::string(error.what()).find("1125899906842624 bytes"), std::string::npos)
        << error.what();
  }
  expect_throw_with<OutOfMemoryError>(
      [] { Tensor::empty({(std::int64_t{1} << 62) + 1}, uint8); }, "more than any machine has");
  // The allocator is still usable afterwards.
  EXPECT_EQ(Tensor::ones({3}).to_vector<float>(), (std::vector<float>{1, 1, 1}));
}

TEST(Sizes, ViewsCheckTheirRangeWithoutOverflow) {
  Tensor base = Tensor::zeros({4});
  expect_throw_with<ValueError>(
      [&] { Tensor::view_of(base, std::numeric_limits<std::int64_t>::max(), {2}); },
      "are outside a tensor of 4 elements");
}

template <typename T>
T only(const Tensor& tensor) {
  return tensor.to_vector<T>().at(0);
}

template <typename T>
void check_integer_edges(DType dtype) {
  constexpr T lowest = std::numeric_limits<T>::min();
  constexpr T highest = std::numeric_limits<T>::max();
  Tensor minimum = Tensor::full({1}, static_cast<double>(lowest), dtype);
  Tensor minus_one = Tensor::full({1}, -1, dtype);
  // INT_MIN / -1 killed the process with SIGFPE; NumPy wraps it to INT_MIN.
  EXPECT_EQ(only<T>(ops::divide(minimum, minus_one)), lowest);
  EXPECT_EQ(only<T>(ops::negative(minimum)), lowest);
  EXPECT_EQ(only<T>(ops::abs(minimum)), lowest);
  EXPECT_EQ(only<T>(ops::add(Tensor::full({1}, static_cast<double>(highest), dtype),
                             Tensor::full({1}, 1, dtype))),
            lowest);
  expect_throw_with<ValueError>(
      [&] { ops::divide(Tensor::full({1}, 7, dtype), Tensor::full({1}, 0, dtype)); },
      "integer division by zero (7 / 0)");
  // Integer powers: exact by repeated squaring, negative exponents refused as in NumPy.
  EXPECT_EQ(only<T>(ops::power(Tensor::full({1}, 3, dtype), Tensor::full({1}, 19, dtype))),
            static_cast<T>(1162261467));
  expect_throw_with<ValueError>(
      [&] { ops::power(Tensor::full({1}, 0, dtype), Tensor::full({1}, -1, dtype)); },
      "integers to negative integer powers are not allowed (got 0 ** -1)");
}

TEST(Integers, EdgesFollowNumPyInsteadOfTrapping) {
  check_integer_edges<std::int32_t>(int32);
  check_integer_edges<std::int64_t>(int64);
  // 3 ** 40 wraps around in int64, as np.int64(3) ** 40 does.
  EXPECT_EQ(only<std::int64_t>(ops::power(Tensor::full({1}, 3, int64), Tensor::full({1}, 40, int64))),
            -6289078614652622815LL);
  // Sums wrap too (they accumulated in a signed 64-bit integer, which is undefined on overflow).
  Tensor big = Tensor::from_vector<std::int64_t>({std::numeric_limits<std::int64_t>::max(), 1}, {2});
  EXPECT_EQ(only<std::int64_t>(ops::reshape(ops::sum(big), {1})),
            std::numeric_limits<std::int64_t>::min());
}

TEST(Casts, NonFiniteToIntegerFollowsXla) {
  Tensor values = Tensor::from_vector<double>({NAN, INFINITY, -INFINITY, 1e20, -1e20, -3.7, 2.9}, {7});
  EXPECT_EQ(ops::cast(values, int32).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{0, INT_MAX, INT_MIN, INT_MAX, INT_MIN, -3, 2}));
  EXPECT_EQ(ops::cast(values, int64).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{0, LLONG_MAX, LLONG_MIN, LLONG_MAX, LLONG_MIN, -3, 2}));
  EXPECT_EQ(ops::cast(values.astype(float32), uint8).to_vector<std::uint8_t>(),
            (std::vector<std::uint8_t>{0, 255, 0, 255, 0, 0, 2}));
  EXPECT_EQ(ops::cast(ops::cast(values, bool_), int32).to_vector<std::int32_t>()[0], 1);  // bool(NaN) is True
}

TEST(Reductions, NaNWinsMaxMinAndArgmaxWhereverItIs) {
  // std::max(best, NaN) kept `best`: a NaN after the first element vanished from max and min.
  for (DType dtype : {float32, float64}) {
    Tensor x = Tensor::from_vector<double>({1, NAN, 5, -2, 3, 4}, {2, 3}).astype(dtype);
    std::vector<double> row_max = ops::max(x, {1}).astype(float64).to_vector<double>();
    EXPECT_TRUE(std::isnan(row_max[0]));
    EXPECT_EQ(row_max[1], 4);
    EXPECT_TRUE(std::isnan(ops::min(x).astype(float64).item()));
    EXPECT_TRUE(std::isnan(ops::max(x, {0}).astype(float64).to_vector<double>()[1]));
    EXPECT_EQ(ops::argmax(x, 1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2}));
    EXPECT_EQ(ops::argmin(x, 1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 0}));
  }
}

TEST(SignedZeros, MinusZeroIsBelowPlusZeroWhateverTheOrder) {
  auto bits = [](const Tensor& t) { return std::signbit(t.to_vector<double>()[0]); };
  Tensor plus = Tensor::full({1}, 0.0, float64), minus = Tensor::full({1}, -0.0, float64);
  EXPECT_FALSE(bits(ops::maximum(minus, plus)));
  EXPECT_FALSE(bits(ops::maximum(plus, minus)));
  EXPECT_TRUE(bits(ops::minimum(minus, plus)));
  EXPECT_TRUE(bits(ops::minimum(plus, minus)));
  EXPECT_FALSE(bits(ops::relu(minus)));
  EXPECT_FALSE(bits(ops::max(Tensor::from_vector<double>({-0.0, 0.0}, {2}))));
  EXPECT_FALSE(bits(ops::max(Tensor::from_vector<double>({0.0, -0.0}, {2}))));
}

TEST(Reductions, MeanOfNothingIsNaN) {
  Tensor empty_rows = Tensor::zeros({0, 3});
  for (float v : ops::mean(empty_rows, {0}).to_vector<float>()) EXPECT_TRUE(std::isnan(v));
  EXPECT_TRUE(std::isnan(ops::mean(Tensor::zeros({0})).item()));
  EXPECT_TRUE(std::isnan(ops::var(Tensor::zeros({0}, float64)).item()));
  expect_throw_with<ValueError>([&] { ops::max(empty_rows, {0}); }, "empty");
}

TEST(NaN, ReachesTheLossInsteadOfVanishingInRelu) {
  // relu(NaN) was 0: a NaN pixel disappeared after the first layer and the loss stayed finite.
  set_random_seed(3);
  Tensor x = ops::random({RandomDistribution::normal, 0, 1, 9}, {16, 4});
  std::vector<float> values = x.to_vector<float>();
  values[5] = NAN;
  x = Tensor::from_vector(values, {16, 4});
  Tensor y = Tensor::zeros({16}, int64);
  Sequential model({layers::Dense(8, "relu"), layers::Dense(3)});
  model.compile("sgd", losses::SparseCategoricalCrossentropy(true));
  auto terminate = std::make_shared<TerminateOnNaN>();
  ::testing::internal::CaptureStdout();
  History history = model.fit(x, y, {.batch_size = 4, .epochs = 3, .shuffle = false, .callbacks = {terminate}, .verbose = 0});
  std::string printed = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(terminate->stopped_batch(), 0);
  EXPECT_NE(printed.find("Batch 0: Invalid loss, terminating training"), std::string::npos) << printed;
  ASSERT_EQ(history.history["loss"].size(), 1u);  // one epoch, cut short
  EXPECT_TRUE(std::isnan(history.history["loss"][0]));
}

TEST(Environment, NumbersAreParsedWithRangeChecks) {
  using environment::parse_seconds;
  using environment::parse_integer;
  EXPECT_EQ(parse_seconds("T", "0.5", 0.001, 1e6).count(), 500);
  EXPECT_EQ(parse_seconds("T", "300", 0.001, 1e6).count(), 300000);
  // inf and 1e300 became a negative deadline; 1e-9 became 0 ms.
  for (const char* bad : {"inf", "1e300", "1e-9", "-5", "0"}) {
    expect_throw_with<ValueError>([&] { parse_seconds("KERAS_COLLECTIVE_TIMEOUT_SECONDS", bad, 0.001, 1e6); },
                                  std::string("KERAS_COLLECTIVE_TIMEOUT_SECONDS='") + bad +
                                      "' is out of range; expected a number of seconds in [0.001, 1e+06]");
  }
  for (const char* bad : {"nan", "", "5s", " 5", "0x10"}) {
    expect_throw_with<ValueError>([&] { parse_seconds("T", bad, 0.001, 1e6); }, "is not a number of seconds");
  }
  // Found by tests/fuzz/environment_fuzzer: a caller's wide range let llround overflow.
  expect_throw_with<ValueError>([&] { parse_seconds("T", "1e17", 1, 1e18); }, "below 9.2e15");
  EXPECT_EQ(parse_integer("N", "+4", 1, 8), 4);
  // As Python's int(): whitespace around, underscores between digits, leading zeros.
  EXPECT_EQ(parse_integer("N", " 4\n", 1, 8), 4);
  EXPECT_EQ(parse_integer("N", "\t-0_7 ", -8, 8), -7);
  EXPECT_EQ(parse_integer("N", "1_000", 1, 1000), 1000);
  for (const char* bad : {"+-4", "4 4", "_4", "4_", "1__0", "- 4", "", "  ", "+", "0x4", "4.0"}) {
    expect_throw_with<ValueError>([&] { parse_integer("N", bad, 1, 8); }, "is not an integer");
  }
  expect_throw_with<ValueError>([] { parse_integer("N", "4 x", 1, 8); }, "N='4 x' is not an integer");
  expect_throw_with<ValueError>([] { parse_integer("N", "99999999999999999999", 1, 8); },
                                "is out of range; expected an integer in [1, 8]");
  // Unprintable and long values are quoted safely and cut short.
  std::string long_value(10000, '7');
  long_value[3] = '\n';
  try {
    parse_integer("N", long_value, 1, 8);
    ADD_FAILURE();
  } catch (const ValueError& error) {
    std::string message = error.what();
    EXPECT_LT(message.size(), 300u) << message;
    EXPECT_NE(message.find("777\\x0A777"), std::string::npos) << message;
    EXPECT_NE(message.find("(10000 bytes in all)"), std::string::npos) << message;
  }
}

TEST(Environment, CollectiveTimeoutIsValidated) {
  ::setenv("KERAS_COLLECTIVE_TIMEOUT_SECONDS", "inf", 1);
  expect_throw_with<ValueError>([] { distribution::LocalCommunicator group; },
                                "KERAS_COLLECTIVE_TIMEOUT_SECONDS='inf' is out of range");
  ::setenv("KERAS_COLLECTIVE_TIMEOUT_SECONDS", "2.5", 1);
  EXPECT_EQ(distribution::LocalCommunicator().timeout().count(), 2500);
  ::unsetenv("KERAS_COLLECTIVE_TIMEOUT_SECONDS");
  EXPECT_EQ(distribution::LocalCommunicator().timeout().count(), 300000);
}

}  // namespace
}  // namespace keras
