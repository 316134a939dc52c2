// bfloat16 and float16 tensors: the conversions (every 16-bit pattern, the rounding edges, and
// float16 against the CPU's own F16C instructions where it has them), casts, printing, files,
// random fills and the float32-compute rule. The ops themselves are checked in half precision
// by the op table (ops_test.cpp, check 5).
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "engine/cpu/instruction_rates.h"
#include "engine/cpu/matmul_primitives.h"
#include "engine/cpu/kernels.h"
#include "engine/environment.h"
#include "engine/half_precision.h"
#include "engine/scalar_rules.h"
#include "tests/test_helpers.h"

namespace keras {
namespace {

float bits_to_float(std::uint32_t bits) { return half_bits::to_float(bits); }

TEST(HalfPrecisionConversion, EveryPatternSurvivesARoundTripThroughFloat32) {
  for (std::uint32_t pattern = 0; pattern < 0x10000; ++pattern) {
    auto bits = static_cast<std::uint16_t>(pattern);
    float b = half_bits::float_of_bfloat16(bits);
    float h = half_bits::float_of_float16(bits);
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(float(BFloat16(b)))) << std::hex << pattern;
    } else {
      EXPECT_EQ(half_bits::bfloat16_of(b), bits) << std::hex << pattern;
    }
    if (std::isnan(h)) {
      EXPECT_TRUE(std::isnan(float(Float16(h)))) << std::hex << pattern;
    } else {
      EXPECT_EQ(half_bits::float16_of(h), bits) << std::hex << pattern;
    }
  }
}

TEST(HalfPrecisionConversion, RoundsToNearestTiesToEven) {
  // bfloat16 keeps 8 significant bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(float(BFloat16(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(float(BFloat16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);
  EXPECT_EQ(float(BFloat16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);  // tie to the even side
  EXPECT_EQ(float(BFloat16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isinf(float(BFloat16(std::numeric_limits<float>::max()))));
  EXPECT_TRUE(std::signbit(float(BFloat16(-0.0f))));
  // float16: 11 significant bits, largest finite 65504, smallest subnormal 2^-24.
  EXPECT_EQ(float(Float16(1.0f + 0x1p-11f)), 1.0f);
  EXPECT_EQ(float(Float16(1.0f + 3 * 0x1p-11f)), 1.0f + 0x1p-9f);
  EXPECT_EQ(float(Float16(65504.0f)), 65504.0f);
  EXPECT_EQ(float(Float16(65519.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(float(Float16(65520.0f))));
  EXPECT_EQ(float(Float16(0x1p-24f)), 0x1p-24f);
  EXPECT_EQ(float(Float16(0x1p-25f)), 0.0f);             // a tie, to the even zero
  EXPECT_EQ(float(Float16(3 * 0x1p-25f)), 0x1p-23f);     // a tie, to the even 2 * 2^-24
  EXPECT_EQ(float(Float16(0x1p-14f - 0x1p-26f)), 0x1p-14f);  // rounds up into the normals
  EXPECT_TRUE(std::isnan(float(Float16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(float(BFloat16(bits_to_float(0x7f800001u)))));  // a signalling NaN
}

#if defined(__F16C__)
std::uint16_t hardware_float16(float value) {
  return static_cast<std::uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(value), _MM_FROUND_TO_NEAREST_INT), 0));
}
#endif

// The CPU's F16C conversion is an independent reference for float16's rounding: every 4099th
// float32 pattern (about a million, all signs, exponents and subnormals) must give its bits.
// F16C comes with the build's x86-64-v3 target (CMakeLists.txt, KERAS_CPU_TARGET).
TEST(HalfPrecisionConversion, Float16MatchesTheCpusF16cInstructions) {
#if defined(__F16C__)
  int mismatches = 0;
  for (std::uint64_t pattern = 0; pattern <= 0xffffffffu; pattern += 4099) {
    float value = bits_to_float(static_cast<std::uint32_t>(pattern));
    if (std::isnan(value)) continue;  // NaN payloads differ; NaN-ness is checked above
    std::uint16_t ours = half_bits::float16_of(value), theirs = hardware_float16(value);
    if (ours != theirs && ++mismatches <= 5) {
      ADD_FAILURE() << std::hexfloat << value << ": ours 0x" << std::hex << ours << ", F16C 0x"
                    << theirs;
    }
  }
  EXPECT_EQ(mismatches, 0);
#else
  GTEST_SKIP() << "built without F16C (KERAS_CPU_TARGET below x86-64-v3)";
#endif
}

TEST(HalfPrecisionTensors, VectorCastsGiveTheScalarRulesBits) {
  std::vector<float> values;
  for (std::uint32_t pattern = 0; pattern < 0xffffffffu - 65521; pattern += 65521) {
    values.push_back(bits_to_float(pattern));
    values.push_back(bits_to_float(pattern | 0x8000u));  // exactly on a bfloat16 tie
  }
  values.push_back(std::numeric_limits<float>::infinity());
  values.push_back(-std::numeric_limits<float>::quiet_NaN());
  Tensor x = Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())});
  std::vector<std::uint16_t> b(values.size()), h(values.size());
  std::memcpy(b.data(), x.astype(bfloat16).raw_data(), 2 * values.size());
  std::memcpy(h.data(), x.astype(float16).raw_data(), 2 * values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) {
      ASSERT_TRUE(std::isnan(half_bits::float_of_bfloat16(b[i])) && std::isnan(half_bits::float_of_float16(h[i])));
      continue;
    }
    ASSERT_EQ(b[i], half_bits::bfloat16_of(values[i])) << std::hexfloat << values[i];
    ASSERT_EQ(h[i], half_bits::float16_of(values[i])) << std::hexfloat << values[i];
  }
  std::vector<float> wide_b = x.astype(bfloat16).to_vector<float>(), wide_h = x.astype(float16).to_vector<float>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) continue;
    ASSERT_EQ(wide_b[i], half_bits::float_of_bfloat16(b[i]));
    ASSERT_EQ(wide_h[i], half_bits::float_of_float16(h[i]));
  }
}

TEST(HalfPrecisionTensors, NamesCastsAndPrinting) {
  EXPECT_EQ(dtype_from_name("bfloat16"), bfloat16);
  EXPECT_EQ(dtype_from_name("float16"), float16);
  EXPECT_EQ(dtype_size(bfloat16), 2u);
  EXPECT_EQ(dtype_size(float16), 2u);
  EXPECT_TRUE(is_floating(bfloat16));
  EXPECT_TRUE(is_half_precision(float16));
  EXPECT_FALSE(is_half_precision(float32));

  Tensor x = Tensor::from_vector(std::vector<float>{1.0f, 1.00390625f, -3.14159f, 70000.0f}, {4});
  Tensor b = x.astype(bfloat16);
  Tensor h = x.astype(float16);
  EXPECT_EQ(b.nbytes(), 8u);
  std::vector<float> b_values = b.to_vector<float>(), h_values = h.to_vector<float>();
  EXPECT_EQ(b_values[1], 1.0f);        // the tie rounds to even
  EXPECT_EQ(b_values[2], -3.140625f);
  EXPECT_EQ(b_values[3], 70144.0f);
  EXPECT_EQ(h_values[2], -3.140625f);
  EXPECT_TRUE(std::isinf(h_values[3]));  // beyond float16's 65504
  EXPECT_NE(b.to_string().find("bfloat16"), std::string::npos) << b.to_string();
  // Integers and bools convert through float32.
  EXPECT_EQ(b.astype(int32).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 1, -3, 70144}));
  EXPECT_EQ(Tensor::full({2}, 0.5, float16).astype(bool_).to_vector<double>(), (std::vector<double>{1, 1}));
  EXPECT_DOUBLE_EQ(Tensor::scalar(0.1, bfloat16).item(), 0.10009765625);
}

TEST(HalfPrecisionTensors, OpsComputeInFloat32AndRoundOnce) {
  // 256 + 1 + 1 in bfloat16 arithmetic would round 257 back to 256 twice; in float32 the
  // sum is 258, which bfloat16 holds.
  Tensor x = Tensor::from_vector(std::vector<float>{256.0f, 1.0f, 1.0f}, {3}).astype(bfloat16);
  EXPECT_EQ(ops::sum(x).dtype(), bfloat16);
  EXPECT_EQ(ops::sum(x).item(), 258.0);
  // A matmul accumulates in float32: 256 + 1 + ... + 1 (64 ones) is 320.
  std::vector<float> row(65, 1.0f);
  row[0] = 256.0f;
  Tensor a = Tensor::from_vector(row, {1, 65}).astype(bfloat16);
  Tensor ones = Tensor::ones({65, 1}, bfloat16);
  EXPECT_EQ(ops::matmul(a, ones).item(), 320.0);
  // Mixed dtypes are refused as for any other pair.
  EXPECT_THROW(ops::add(x, x.astype(float32)), DTypeError);
  // Gradients flow through casts and come back in each input's dtype.
  Tensor w = Tensor::full({3}, 2.0, float32).set_requires_grad(true);
  Tensor y = ops::sum(ops::cast(w, bfloat16) * x);
  y.backward();
  EXPECT_EQ(w.grad().dtype(), float32);
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{256.0f, 1.0f, 1.0f}));
}

// The CPU's matmul on 16-bit tensors, in every orientation, with products large enough to be
// split across the pool by rows and by columns (the op table's are one call each): on oneDNN's
// bf16 matmul where the CPU multiplies bfloat16 (AMX, AVX512-BF16), on float32 copies elsewhere
// and for float16; either way float32 accumulation and one rounding of each result.
TEST(HalfPrecisionTensors, LargeProductsInEveryOrientationRoundOnce) {
  const int threads = num_threads();
  set_num_threads(2);  // the splits need a second thread
  struct Product {
    std::int64_t batch, m, n, k;
  };
  // Tall (split by rows), wide (split by 64-column panels), batched, and small (one call); on
  // float32 copies, tall enough that each thread's rows go in several cache-sized blocks, alone
  // and batched, large with fewer rows than a block, and deep enough to be summed in blocks of
  // k (a kernel gradient's shape: B large, C small).
  const Product products[] = {{1, 160, 96, 300}, {1, 24, 700, 256}, {3, 64, 80, 200}, {1, 5, 7, 9},
                              {1, 1200, 256, 64}, {2, 1200, 256, 32}, {1, 8, 1000, 600}, {1, 48, 160, 2048}};
  for (DType dtype : {bfloat16, float16}) {
    for (const Product& p : products) {
      for (bool transpose_a : {false, true}) {
        for (bool transpose_b : {false, true}) {
          Shape a_shape{transpose_a ? p.k : p.m, transpose_a ? p.m : p.k};
          Shape b_shape{transpose_b ? p.n : p.k, transpose_b ? p.k : p.n};
          Shape out_shape{p.m, p.n};
          if (p.batch > 1) {
            a_shape.insert(a_shape.begin(), p.batch);
            b_shape.insert(b_shape.begin(), p.batch);
            out_shape.insert(out_shape.begin(), p.batch);
          }
          Tensor a = testing::random_tensor(a_shape, 11, float32).astype(dtype);
          Tensor b = testing::random_tensor(b_shape, 12, float32).astype(dtype);
          Tensor out = Tensor::empty(out_shape, dtype), reference = Tensor::empty(out_shape, float64);
          cpu::matmul(a, b, transpose_a, transpose_b, out);
          cpu::matmul(a.astype(float64), b.astype(float64), transpose_a, transpose_b, reference);
          double unit = dtype == bfloat16 ? 1.0 / 256 : 1.0 / 2048;
          testing::expect_close(out.to_vector<double>(), reference.to_vector<double>(), unit,
                                str(dtype_name(dtype), " ", p.batch, "x", p.m, "x", p.n, "x", p.k,
                                    transpose_a ? " A^T" : "", transpose_b ? " B^T" : ""));
        }
      }
    }
  }
  set_num_threads(threads);
}

// einsum on 16-bit tensors: the product rounded once, as the same einsum in float32 rounded;
// where a letter is summed out before the product, the sum too stays in float32.
TEST(HalfPrecisionTensors, EinsumRoundsOnceAsFloat32Rounded) {
  struct Case {
    const char* equation;
    Shape a, b;
  };
  const Case cases[] = {{"aecd,abcd->acbe", {2, 9, 3, 4}, {2, 7, 3, 4}},   // attention scores
                        {"acbe,aecd->abcd", {2, 3, 7, 9}, {2, 9, 3, 4}},   // their product with the values
                        {"btd,de->bte", {3, 40, 16}, {16, 24}},            // a dense layer
                        {"ij,kl->ik", {5, 300}, {6, 300}}};                // both operands summed first
  for (DType dtype : {bfloat16, float16}) {
    for (const Case& c : cases) {
      Tensor a = testing::random_tensor(c.a, 31, float32).astype(dtype);
      Tensor b = testing::random_tensor(c.b, 32, float32).astype(dtype);
      Tensor expected = ops::einsum(c.equation, a.astype(float32), b.astype(float32)).astype(dtype);
      Tensor got = ops::einsum(c.equation, a, b);
      EXPECT_EQ(got.dtype(), dtype);
      EXPECT_EQ(got.to_vector<double>(), expected.to_vector<double>()) << c.equation << " " << dtype_name(dtype);
    }
  }
}

// Reductions read 16-bit tensors as they are, a row at a time, with the arithmetic of a
// float32 copy: the same bits as reducing the copy and rounding, over every block layout (row
// sums, column sums, both, axes apart), NaN included.
TEST(HalfPrecisionTensors, ReductionsEqualTheFloat32CopyRounded) {
  Tensor x = testing::random_tensor({6, 70, 5, 33}, 41, float32);
  std::vector<float> values = x.to_vector<float>();
  values[1000] = std::numeric_limits<float>::quiet_NaN();
  Tensor with_nan = Tensor::from_vector(values, x.shape());
  const std::vector<std::vector<std::int64_t>> axes_cases = {{3}, {0}, {1}, {0, 1}, {1, 3}, {0, 2}, {0, 1, 2, 3}, {}};
  for (DType dtype : {bfloat16, float16}) {
    for (const Tensor& source : {x, with_nan}) {
      Tensor half = source.astype(dtype);
      Tensor wide = half.astype(float32);
      auto same_bits = [](const Tensor& got, const Tensor& expected) {
        return got.dtype() == expected.dtype() && got.shape() == expected.shape() &&
               std::memcmp(got.raw_data(), expected.raw_data(), got.nbytes()) == 0;
      };
      for (const auto& axes : axes_cases) {
        const std::string what = str(dtype_name(dtype), " axes ", shape_to_string(axes));
        EXPECT_TRUE(same_bits(ops::sum(half, axes), ops::sum(wide, axes).astype(dtype))) << what;
        EXPECT_TRUE(same_bits(ops::max(half, axes), ops::max(wide, axes).astype(dtype))) << what;
        EXPECT_TRUE(same_bits(ops::min(half, axes), ops::min(wide, axes).astype(dtype))) << what;
      }
    }
  }
}

// Softmax and its gradient on 16-bit lines along the last axis, converted a group of lines at a
// time: the float32 rule's results rounded, bit for bit, with lines shorter than a group (many
// a group, the last group partial), longer than one (a group of one line), on 1 and 2 threads.
TEST(HalfPrecisionTensors, SoftmaxLinesInGroupsEqualTheFloat32RuleRounded) {
  const int threads = num_threads();
  const Shape shapes[] = {{37, 7}, {700, 50}, {5, 3000}};
  for (int thread_count : {1, 2}) {
    set_num_threads(thread_count);
    for (DType dtype : {bfloat16, float16}) {
      for (const Shape& shape : shapes) {
        Tensor x = testing::random_tensor(shape, 51, float32).astype(dtype);
        Tensor dy = testing::random_tensor(shape, 52, float32).astype(dtype);
        Tensor y = ops::softmax(x, -1);
        EXPECT_EQ(y.to_vector<double>(), ops::softmax(x.astype(float32), -1).astype(dtype).to_vector<double>())
            << dtype_name(dtype) << " " << shape_to_string(shape) << " threads " << thread_count;
        Tensor dx = Tensor::empty(shape, dtype), wide_dx = Tensor::empty(shape, float32);
        cpu::softmax_gradient(y, dy, 1, false, dx);
        cpu::softmax_gradient(y.astype(float32), dy.astype(float32), 1, false, wide_dx);
        EXPECT_EQ(dx.to_vector<double>(), wide_dx.astype(dtype).to_vector<double>())
            << dtype_name(dtype) << " " << shape_to_string(shape) << " threads " << thread_count;
      }
    }
  }
  set_num_threads(threads);
}

// The batch normalization kernels on 16-bit x (bfloat16 read in registers inside the loops,
// float16 widened a block at a time) give the float32 kernels' results on x's float32 copy, the
// 16-bit outputs rounded once, bit for bit: channels-last shapes whose span holds one lane group
// and several, whose blocks end mid-span, one block and several; channels first; 1 and 2 threads.
TEST(HalfPrecisionTensors, BatchNormalizationKernelsEqualTheFloat32KernelsRounded) {
  struct Case {
    Shape shape;
    int axis;
  };
  const Case cases[] = {{{5, 9, 9, 12}, 3},  {{3, 50, 70, 12}, 3}, {{33, 7, 5, 40}, 3},
                        {{4001, 1}, 1},      {{17, 64}, 1},        {{6, 40, 37}, 1}};
  const int threads = num_threads();
  auto same_bits = [](const Tensor& got, const Tensor& expected) {
    return got.dtype() == expected.dtype() && got.shape() == expected.shape() &&
           std::memcmp(got.raw_data(), expected.raw_data(), got.nbytes()) == 0;
  };
  for (int thread_count : {1, 2}) {
    set_num_threads(thread_count);
    for (DType dtype : {bfloat16, float16}) {
      for (const Case& c : cases) {
        const std::string what = str(dtype_name(dtype), " ", shape_to_string(c.shape), " threads ", thread_count);
        const std::int64_t channels = c.shape[static_cast<std::size_t>(c.axis)];
        // Away from zero, so the per-channel shift and the centred sums matter.
        Tensor x = ops::add(testing::random_tensor(c.shape, 61, float32), Tensor::scalar(3.0)).astype(dtype);
        Tensor dy = testing::random_tensor(c.shape, 62, float32).astype(dtype);
        Tensor wide_x = x.astype(float32), wide_dy = dy.astype(float32);
        auto per_channel = [&] { return Tensor::empty({channels}, float32); };

        Tensor mean = per_channel(), variance = per_channel(), wide_mean = per_channel(), wide_variance = per_channel();
        cpu::batch_normalization_statistics(x, c.axis, mean, variance);
        cpu::batch_normalization_statistics(wide_x, c.axis, wide_mean, wide_variance);
        EXPECT_TRUE(same_bits(mean, wide_mean)) << what;
        EXPECT_TRUE(same_bits(variance, wide_variance)) << what;

        Tensor multiplier = testing::random_tensor({channels}, 63, float32);
        Tensor offset = testing::random_tensor({channels}, 64, float32);
        Tensor out = Tensor::empty(c.shape, dtype), wide_out = Tensor::empty(c.shape, float32);
        cpu::channel_affine(x, multiplier, offset, c.axis, out);
        cpu::channel_affine(wide_x, multiplier, offset, c.axis, wide_out);
        EXPECT_TRUE(same_bits(out, wide_out.astype(dtype))) << what;

        Tensor inverse = ops::reciprocal(ops::sqrt(ops::add(wide_variance, Tensor::scalar(1e-3))));
        Tensor scale = testing::random_tensor({channels}, 65, float32);
        Tensor dx = Tensor::empty(c.shape, dtype), wide_dx = Tensor::empty(c.shape, float32);
        Tensor sum = per_channel(), centered = per_channel(), wide_sum = per_channel(), wide_centered = per_channel();
        cpu::batch_normalization_gradient(x, dy, wide_mean, inverse, scale, c.axis, dx, sum, centered);
        cpu::batch_normalization_gradient(wide_x, wide_dy, wide_mean, inverse, scale, c.axis, wide_dx, wide_sum,
                                          wide_centered);
        EXPECT_TRUE(same_bits(dx, wide_dx.astype(dtype))) << what;
        EXPECT_TRUE(same_bits(sum, wide_sum)) << what;
        EXPECT_TRUE(same_bits(centered, wide_centered)) << what;
      }
    }
  }
  set_num_threads(threads);
}

// A 16-bit operand meeting a float32 one (a float32 seed's gradient through a bfloat16 product)
// is read as 16 bits, never as float32: the product of float32 copies.
TEST(HalfPrecisionTensors, AProductOfMixedDtypesReadsEachAsItIs) {
  Tensor a = testing::random_tensor({40, 30}, 21, float32);
  Tensor b = testing::random_tensor({30, 20}, 22, float32).astype(bfloat16);
  Tensor out = Tensor::empty({40, 20}, float32), expected = Tensor::empty({40, 20}, float32);
  cpu::matmul(a, b, false, false, out);
  cpu::matmul(a, b.astype(float32), false, false, expected);
  EXPECT_EQ(out.to_vector<float>(), expected.to_vector<float>());
}

// bfloat16 products run on the CPU's bf16 instructions where they pay: always with AMX; with
// AVX512-BF16 alone where its dot products measure at least 1.5x the float32 FMA rate (on the
// Xeon VM of 2026-12-07 they ran at 0.49x, and taking them made mixed_bfloat16 steps 1.24-1.33x
// float32's time); KERAS_CPU_BFLOAT16_GEMM=1 takes them wherever they exist, 0 never. Elsewhere
// the route says why not.
TEST(HalfPrecisionTensors, BFloat16ProductsUseTheCpusBfloat16InstructionsWhereTheyPay) {
  std::string route = cpu::bfloat16_gemm_description();
  std::printf("bfloat16 GEMM: %s\n", route.c_str());
  std::optional<std::string> setting = environment::get("KERAS_CPU_BFLOAT16_GEMM");
  if (setting && *setting == "0") {
    EXPECT_FALSE(cpu::cpu_multiplies_bfloat16()) << route;
    return;
  }
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool has_dot_products = __builtin_cpu_supports("avx512bf16");
  const bool has_amx = cpu::onednn_finds_amx();
#else
  const bool has_dot_products = false, has_amx = false;
#endif
  if (!has_dot_products) {
    EXPECT_FALSE(cpu::cpu_multiplies_bfloat16()) << route;
  } else if (has_amx || (setting && *setting == "1")) {
    EXPECT_TRUE(cpu::cpu_multiplies_bfloat16()) << route;
  } else {
    // The measured route: it names the measurement either way.
    EXPECT_NE(route.find("measured at "), std::string::npos) << route;
    const double speedup = cpu::bfloat16_dot_rate_over_float32_fma_rate();
    EXPECT_GT(speedup, 0.0);
    // Far from the threshold, a second measurement agrees with the first.
    if (speedup < 1.2) {
      EXPECT_FALSE(cpu::cpu_multiplies_bfloat16()) << route << "; now " << speedup;
    }
    if (speedup > 1.8) {
      EXPECT_TRUE(cpu::cpu_multiplies_bfloat16()) << route << "; now " << speedup;
    }
  }
}

// The timing behind that decision gives a ratio a CPU can have.
TEST(HalfPrecisionTensors, BFloat16DotRateIsMeasuredWhereTheCpuHasIt) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16")) {
    EXPECT_EQ(cpu::bfloat16_dot_rate_over_float32_fma_rate(), 0.0);
    GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  }
  const double speedup = cpu::bfloat16_dot_rate_over_float32_fma_rate();
  // vdpbf16ps does 32 multiply-adds to an FMA's 16: a rate ratio above 4 or below 0.1 is a
  // broken timing, not a CPU.
  EXPECT_GT(speedup, 0.1);
  EXPECT_LT(speedup, 4.0);
#else
  GTEST_SKIP() << "x86-64 only";
#endif
}

// ReLU and its gradient select 16-bit patterns on the CPU (engine/cpu/half_relu.h): against the
// float32 rule rounded once, for every bfloat16 and float16 pattern of x, and for the gradient
// every pattern of x beside gradients that cover zeros, subnormals, normals, the largest
// finite values, infinities and NaNs of both signs. Non-NaN results equal bit for bit; a NaN
// where the rule gives one.
TEST(HalfPrecisionTensors, ReluAndItsGradientEqualTheFloat32RuleOnEveryPattern) {
  const std::vector<std::uint16_t> gradient_patterns = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x3c00, 0xbc00,
                                                        0x3f80, 0xbf80, 0x4049, 0xc049, 0x7bff, 0xfbff, 0x7f7f,
                                                        0xff7f, 0x7c00, 0xfc00, 0x7f80, 0xff80, 0x7fc0, 0xffc0,
                                                        0x7e00, 0xfe00, 0x7f81, 0x7c01};
  for (DType dtype : {bfloat16, float16}) {
    const bool brain = dtype == bfloat16;
    auto to_float = [&](std::uint16_t bits) {
      return brain ? half_bits::float_of_bfloat16(bits) : half_bits::float_of_float16(bits);
    };
    auto round = [&](float value) { return brain ? half_bits::bfloat16_of(value) : half_bits::float16_of(value); };
    const std::int64_t patterns = 0x10000, gradients = static_cast<std::int64_t>(gradient_patterns.size());
    Tensor x = Tensor::empty({gradients, patterns}, dtype), g = Tensor::empty({gradients, patterns}, dtype);
    auto* x_bits = static_cast<std::uint16_t*>(x.raw_data());
    auto* g_bits = static_cast<std::uint16_t*>(g.raw_data());
    for (std::int64_t row = 0; row < gradients; ++row) {
      for (std::int64_t pattern = 0; pattern < patterns; ++pattern) {
        x_bits[row * patterns + pattern] = static_cast<std::uint16_t>(pattern);
        g_bits[row * patterns + pattern] = gradient_patterns[static_cast<std::size_t>(row)];
      }
    }
    Tensor out = Tensor::empty(x.shape(), dtype), input_gradient = Tensor::empty(x.shape(), dtype);
    cpu::unary(UnaryOp::relu, x, out);
    cpu::unary_gradient(UnaryOp::relu, x, g, input_gradient);
    const auto* out_bits = static_cast<const std::uint16_t*>(out.raw_data());
    const auto* gradient_bits = static_cast<const std::uint16_t*>(input_gradient.raw_data());
    int mismatches = 0;
    for (std::int64_t i = 0; i < x.size() && mismatches < 10; ++i) {
      const float xf = to_float(x_bits[i]), gf = to_float(g_bits[i]);
      const float forward = scalar::relu(xf), backward = gf * scalar::relu_derivative(xf);
      const bool forward_ok = std::isnan(forward) ? std::isnan(to_float(out_bits[i])) : out_bits[i] == round(forward);
      const bool backward_ok =
          std::isnan(backward) ? std::isnan(to_float(gradient_bits[i])) : gradient_bits[i] == round(backward);
      if (!forward_ok || !backward_ok) {
        ++mismatches;
        ADD_FAILURE() << dtype_name(dtype) << std::hex << " x 0x" << x_bits[i] << " g 0x" << g_bits[i] << ": relu 0x"
                      << out_bits[i] << " (rule 0x" << round(forward) << "), gradient 0x" << gradient_bits[i]
                      << " (rule 0x" << round(backward) << ")";
      }
    }
    // In place, as autograd may call it.
    cpu::unary(UnaryOp::relu, x, x);
    EXPECT_EQ(std::memcmp(x.raw_data(), out.raw_data(), static_cast<std::size_t>(x.nbytes())), 0);
  }
}

// The CPU fuses broadcasting of a repeating operand (a bias, a scalar) on either side; the
// result is the float32 result rounded once.
TEST(HalfPrecisionTensors, RepeatingOperandsOnEitherSideRoundOnce) {
  Tensor x = testing::random_tensor({5, 300, 7}, 3, float32);
  Tensor bias = testing::random_tensor({7}, 4, float32), row = testing::random_tensor({1, 300, 7}, 5, float32);
  for (DType dtype : {bfloat16, float16}) {
    Tensor hx = x.astype(dtype), hbias = bias.astype(dtype), hrow = row.astype(dtype);
    auto expected = [&](const Tensor& wide) { return wide.astype(dtype).to_vector<double>(); };
    EXPECT_EQ(ops::subtract(hbias, hx).to_vector<double>(), expected(ops::subtract(hbias.astype(float32), hx.astype(float32))));
    EXPECT_EQ(ops::divide(hx, hrow).to_vector<double>(), expected(ops::divide(hx.astype(float32), hrow.astype(float32))));
    EXPECT_EQ(ops::multiply(Tensor::scalar(0.3, dtype), hx).to_vector<double>(),
              expected(ops::multiply(Tensor::scalar(0.3, dtype).astype(float32), hx.astype(float32))));
  }
}

TEST(HalfPrecisionTensors, RandomFillsAreTheFloat32DrawRounded) {
  RandomSpec spec{RandomDistribution::normal, 0.0, 1.0, 42};
  Tensor wide = ops::random(spec, {64}, float32);
  Tensor narrow = ops::random(spec, {64}, bfloat16);
  EXPECT_EQ(narrow.dtype(), bfloat16);
  EXPECT_EQ(narrow.to_vector<float>(), wide.astype(bfloat16).to_vector<float>());
}

TEST(HalfPrecisionTensors, SafetensorsStoresBf16AndF16) {
  std::string path = (std::filesystem::temp_directory_path() / "keras_half_precision.safetensors").string();
  Tensor x = testing::random_tensor({3, 5}, 7, float32);
  io::save_safetensors(path, {{"b", x.astype(bfloat16)}, {"h", x.astype(float16)}});
  auto loaded = io::load_safetensors(path);
  std::filesystem::remove(path);
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_EQ(loaded[0].second.dtype(), bfloat16);
  EXPECT_EQ(loaded[1].second.dtype(), float16);
  EXPECT_EQ(loaded[0].second.to_vector<float>(), x.astype(bfloat16).to_vector<float>());
  EXPECT_EQ(loaded[1].second.to_vector<float>(), x.astype(float16).to_vector<float>());
}

}  // namespace
}  // namespace keras
