// engine/float_math.h's float32 exp and erf against double precision, over a spread of every
// float in their ranges, and at the edges (NaN, infinities, overflow and underflow, signs).
#include <cmath>
#include <cstdint>
#include <limits>

#include "engine/float_math.h"
#include "tests/test_helpers.h"

namespace keras {
namespace {

// The floats from `low` to `high`, every `step`-th bit pattern (both ends of the range on the
// same side of zero or straddling it).
template <typename Check>
void for_floats_between(float low, float high, std::uint32_t step, Check check) {
  for (float x = low; x <= high;) {
    check(x);
    std::uint32_t bits = float_math::to_bits(x);
    // Walking bit patterns: upwards means smaller bits for negative floats.
    bool negative = (bits >> 31) != 0;
    if (negative && (bits & 0x7fffffffu) <= step) {
      x = 0.0f;
    } else {
      x = float_math::from_bits(negative ? bits - step : bits + step);
    }
  }
}

TEST(FloatMath, ExpIsWithinTwoUlpOfTheTrueValueWhereItsResultIsNormal) {
  double worst_ulps = 0;
  float worst_at = 0;
  std::int64_t checked = 0;
  for_floats_between(-87.3f, 88.37f, 4099, [&](float x) {
    double exact = std::exp(static_cast<double>(x));
    double ulp = std::ldexp(1.0, std::ilogb(exact) - 23);
    double ulps = std::fabs(static_cast<double>(float_math::exp(x)) - exact) / ulp;
    if (ulps > worst_ulps) worst_ulps = ulps, worst_at = x;
    ++checked;
  });
  EXPECT_GT(checked, 500000);
  EXPECT_LE(worst_ulps, 2.0) << "at x = " << worst_at;
  EXPECT_EQ(float_math::exp(0.0f), 1.0f);
  EXPECT_EQ(float_math::exp(1.0f), std::exp(1.0f));
}

TEST(FloatMath, ExpOverflowsToInfinityUnderflowsToZeroAndKeepsNaN) {
  const float infinity = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_math::exp(89.0f), infinity);
  EXPECT_EQ(float_math::exp(infinity), infinity);
  EXPECT_EQ(float_math::exp(-88.0f), 0.0f);  // below exp's smallest normal result
  EXPECT_EQ(float_math::exp(-infinity), 0.0f);
  EXPECT_TRUE(std::isnan(float_math::exp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_GT(float_math::exp(-87.3f), 0.0f);
  EXPECT_TRUE(std::isfinite(float_math::exp(88.37f)));
}

TEST(FloatMath, ErfIsWithinHalfAMillionthOfTheTrueValue) {
  double worst = 0;
  float worst_at = 0;
  for_floats_between(-6.0f, 6.0f, 1021, [&](float x) {
    double error = std::fabs(static_cast<double>(float_math::erf(x)) - std::erf(static_cast<double>(x)));
    if (error > worst) worst = error, worst_at = x;
  });
  EXPECT_LE(worst, 4.5e-7) << "at x = " << worst_at;
  // Near zero erf is linear: relative accuracy matters there (GELU's gradient at small inputs).
  for (float x : {1e-30f, 1e-10f, 1e-5f, 1e-3f}) {
    double exact = std::erf(static_cast<double>(x));
    EXPECT_NEAR(float_math::erf(x) / exact, 1.0, 4e-7) << "x = " << x;
  }
}

TEST(FloatMath, ErfIsOddSaturatesAndKeepsNaN) {
  const float infinity = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_math::erf(infinity), 1.0f);
  EXPECT_EQ(float_math::erf(-infinity), -1.0f);
  EXPECT_EQ(float_math::erf(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(float_math::erf(-0.0f)));
  EXPECT_TRUE(std::isnan(float_math::erf(std::numeric_limits<float>::quiet_NaN())));
  for (float x : {0.1f, 0.5f, 1.0f, 2.0f, 3.5f, 5.0f}) EXPECT_EQ(float_math::erf(-x), -float_math::erf(x));
}

}  // namespace
}  // namespace keras
