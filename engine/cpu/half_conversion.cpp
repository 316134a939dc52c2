// Bulk float32 <-> bfloat16 / float16 conversions (see half_conversion.h).
#include "engine/cpu/half_conversion.h"

#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>
#define KERAS_HALF_CONVERSION_AVX2 1
#endif

namespace keras::cpu {

#ifdef KERAS_HALF_CONVERSION_AVX2
namespace {

// 16-wide versions for CPUs with AVX-512, found at run time (the build targets x86-64-v3). They
// pay in cache, where the fused ops' chunks are (narrowing 16K elements on one core of the Xeon
// VM: 0.17 against 0.20-0.27 ns an element 8 wide); from memory both widths run at 0.23, bound
// by memory. Each converts the whole 16-element groups of `count` and returns how many it
// converted; the callers finish the rest. Same results bit for bit as the scalar rules.
// GCC 12's unmasked forms of these intrinsics start from an undefined register, which
// -Wmaybe-uninitialized reports at every use; the zero-masked forms with every lane selected
// are the same instructions.
constexpr __mmask16 kAllLanes = 0xffff;

bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return has;
}

__attribute__((target("avx512f,avx512bw"))) std::int64_t widen_avx512(const BFloat16* in, float* out, std::int64_t count) {
  std::int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m256i halves = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAllLanes, _mm512_maskz_cvtepu16_epi32(kAllLanes, halves), 16)));
  }
  return i;
}

__attribute__((target("avx512f,avx512bw"))) std::int64_t widen_avx512(const Float16* in, float* out, std::int64_t count) {
  std::int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m256i halves = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_ps(out + i, _mm512_maskz_cvtph_ps(kAllLanes, halves));
  }
  return i;
}

// 16 elements by the integer rule: round to nearest even, NaN to a quiet NaN of its sign
// (narrow()'s 8-wide rule).
__attribute__((target("avx512f,avx512bw"), always_inline)) inline void narrow_group_by_integer_rule(const float* in, BFloat16* out) {
  const __m512i bits = _mm512_castps_si512(_mm512_loadu_ps(in));
  const __m512i upper = _mm512_maskz_srli_epi32(kAllLanes, bits, 16);
  const __m512i rounded = _mm512_maskz_srli_epi32(
      kAllLanes, _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(upper, _mm512_set1_epi32(1)))), 16);
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i nan = _mm512_or_si512(_mm512_and_si512(upper, _mm512_set1_epi32(0x8000)), _mm512_set1_epi32(0x7fc0));
  const __m512i result = _mm512_mask_blend_epi32(is_nan, rounded, nan);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_maskz_cvtepi32_epi16(kAllLanes, result));
}

__attribute__((target("avx512f,avx512bw"))) std::int64_t narrow_avx512(const float* in, BFloat16* out, std::int64_t count) {
  std::int64_t i = 0;
  for (; i + 16 <= count; i += 16) narrow_group_by_integer_rule(in + i, out + i);
  return i;
}

// With AVX512-BF16: the CPU's own conversion (vcvtneps2bf16, also round to nearest even), 2.4x
// the integer rule's rate in cache (0.07 against 0.17 ns an element for 16K elements, one core
// of the Xeon VM).
// It keeps a NaN's payload and reads subnormal inputs as zero, so a group holding either
// (vfpclassps: quiet or signalling NaN, subnormal) takes the integer rule: same bits always.
bool cpu_converts_bfloat16() {
  static const bool has = cpu_has_avx512() && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bf16") &&
                          __builtin_cpu_supports("avx512vl");
  return has;
}

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16"))) std::int64_t narrow_avx512_bf16(const float* in, BFloat16* out,
                                                                                                   std::int64_t count) {
  constexpr int kNanOrSubnormal = 0x01 | 0x20 | 0x80;
  std::int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 values = _mm512_loadu_ps(in + i);
    if (_mm512_fpclass_ps_mask(values, kNanOrSubnormal) != 0) {
      narrow_group_by_integer_rule(in + i, out + i);
      continue;
    }
    const __m256bh rounded = _mm512_cvtneps_pbh(values);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), reinterpret_cast<const __m256i&>(rounded));
  }
  return i;
}

__attribute__((target("avx512f,avx512bw"))) std::int64_t narrow_avx512(const float* in, Float16* out, std::int64_t count) {
  std::int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m256i halves = _mm512_maskz_cvtps_ph(kAllLanes, _mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), halves);
  }
  return i;
}

}  // namespace
#endif

void widen(const BFloat16* in, float* out, std::int64_t count) {
  std::int64_t i = 0;
#ifdef KERAS_HALF_CONVERSION_AVX2
  if (cpu_has_avx512()) i = widen_avx512(in, out, count);
  for (; i + 8 <= count; i += 8) {
    __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    __m256i words = _mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16);
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(words));
  }
#endif
  for (; i < count; ++i) out[i] = static_cast<float>(in[i]);
}

void widen(const Float16* in, float* out, std::int64_t count) {
  std::int64_t i = 0;
#ifdef KERAS_HALF_CONVERSION_AVX2
  if (cpu_has_avx512()) i = widen_avx512(in, out, count);
  for (; i + 8 <= count; i += 8) {
    __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(halves));
  }
#endif
  for (; i < count; ++i) out[i] = static_cast<float>(in[i]);
}

void narrow(const float* in, BFloat16* out, std::int64_t count) {
  std::int64_t i = 0;
#ifdef KERAS_HALF_CONVERSION_AVX2
  if (cpu_converts_bfloat16()) {
    i = narrow_avx512_bf16(in, out, count);
  } else if (cpu_has_avx512()) {
    i = narrow_avx512(in, out, count);
  }
  const __m256i rounding_bias = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i magnitude_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i infinity = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet_nan = _mm256_set1_epi32(0x7fc0);
  const __m256i sign_bit = _mm256_set1_epi32(0x8000);
  for (; i + 8 <= count; i += 8) {
    __m256i bits = _mm256_castps_si256(_mm256_loadu_ps(in + i));
    // Round to nearest even: add 0x7fff plus the lowest kept bit, keep the upper half.
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), one);
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(rounding_bias, odd)), 16);
    // NaN: a quiet NaN of its sign, as the scalar rule.
    __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, magnitude_mask), infinity);
    __m256i nan = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(bits, 16), sign_bit), quiet_nan);
    __m256i result = _mm256_blendv_epi8(rounded, nan, is_nan);
    // 8 x 32 -> 8 x 16 bits: pack the two 128-bit lanes (values fit unsigned 16 bits).
    __m128i low = _mm256_castsi256_si128(result), high = _mm256_extracti128_si256(result, 1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm_packus_epi32(low, high));
  }
#endif
  for (; i < count; ++i) out[i] = BFloat16(in[i]);
}

void narrow(const float* in, Float16* out, std::int64_t count) {
  std::int64_t i = 0;
#ifdef KERAS_HALF_CONVERSION_AVX2
  if (cpu_has_avx512()) i = narrow_avx512(in, out, count);
  for (; i + 8 <= count; i += 8) {
    __m128i halves = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), halves);
  }
#endif
  for (; i < count; ++i) out[i] = Float16(in[i]);
}

Tensor float32_copy(const Tensor& x) {
  if (!is_half_precision(x.dtype())) return x;
  Tensor wide = Tensor::empty(x.local_shape(), float32, x.device());
  cast(x, wide);
  return wide;
}

}  // namespace keras::cpu
