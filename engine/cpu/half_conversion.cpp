// Bulk float32 <-> bfloat16 / float16 conversions (see half_conversion.h).
#include "engine/cpu/half_conversion.h"

#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>
#define KERAS_HALF_CONVERSION_AVX2 1
#endif

namespace keras::cpu {

void widen(const BFloat16* in, float* out, std::int64_t count) {
  std::int64_t i = 0;
#ifdef KERAS_HALF_CONVERSION_AVX2
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
