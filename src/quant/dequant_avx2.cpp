// AVX2 dequantizers for Q8_0, Q2_K, Q4_K and IQ2_XXS, bit-identical to the ref:: versions
// (each element is computed with the same f32 operations in the same order).
// ISA-specific translation unit: uses only intrinsics and functions with internal linkage.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/avx2_util.h"
#include "quant/blocks.h"
#include "quant/iq2xxs_tables.h"
#include "quant/simd.h"

namespace ds4::quant::avx2 {

namespace {

using simd::f16_to_f32;

// 8 unsigned byte codes at p -> f32.
__m256 u8x8_to_ps(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)); }

// y[0..16) = dl * code - ml for 16 byte codes.
void affine16(__m128i codes, float dl, float ml, float* y) {
  const __m256 vdl = _mm256_set1_ps(dl);
  const __m256 vml = _mm256_set1_ps(ml);
  _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(vdl, u8x8_to_ps(codes)), vml));
  _mm256_storeu_ps(y + 8, _mm256_sub_ps(_mm256_mul_ps(vdl, u8x8_to_ps(_mm_srli_si128(codes, 8))),
                                        vml));
}


}  // namespace

void dequant_q8_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const __m256 d = _mm256_set1_ps(f16_to_f32(b[i].d));
    for (int j = 0; j < kQK8_0; j += 8) {
      __m128i q;
      std::memcpy(&q, b[i].qs + j, 8);
      const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
      _mm256_storeu_ps(dst + i * kQK8_0 + j, _mm256_mul_ps(d, v));
    }
  }
}

void dequant_q2_k(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ2_K*>(src);
  const __m128i m3 = _mm_set1_epi8(3);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ2_K& x = blocks[b];
    const float d = f16_to_f32(x.d);
    const float dmin = f16_to_f32(x.dmin);
    float* y = dst + b * kQK_K;
    for (int k = 0; k < 2; ++k) {
      for (int h = 0; h < 2; ++h) {  // bytes 16h .. 16h+15 of the 32-byte chunk
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qs + 32 * k + 16 * h));
        for (int s = 0; s < 4; ++s) {
          const int j = 8 * k + 2 * s + h;  // sub-block of elements 128k + 32s + 16h + (0..15)
          const float dl = d * static_cast<float>(x.scales[j] & 15);
          const float ml = dmin * static_cast<float>(x.scales[j] >> 4);
          affine16(_mm_and_si128(_mm_srli_epi16(q, 2 * s), m3), dl, ml, y + 16 * j);
        }
      }
    }
  }
}

void dequant_q4_k(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_K*>(src);
  const __m128i m4 = _mm_set1_epi8(0x0f);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K& x = blocks[b];
    const float d = f16_to_f32(x.d);
    const float dmin = f16_to_f32(x.dmin);
    for (int j = 0; j < 8; ++j) {
      int sc, mn;
      scale_min_k4(j, x.scales, &sc, &mn);
      const float dl = d * static_cast<float>(sc);
      const float ml = dmin * static_cast<float>(mn);
      for (int h = 0; h < 2; ++h) {
        const __m128i q =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qs + 32 * (j / 2) + 16 * h));
        const __m128i codes = (j & 1) ? _mm_and_si128(_mm_srli_epi16(q, 4), m4)
                                      : _mm_and_si128(q, m4);
        affine16(codes, dl, ml, dst + b * kQK_K + 32 * j + 16 * h);
      }
    }
  }
}

void dequant_iq2_xxs(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockIq2Xxs*>(src);
  const __m256i sign_bit = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = f16_to_f32(blocks[b].d);
    for (int k = 0; k < 8; ++k) {
      uint32_t a[2];
      std::memcpy(a, blocks[b].qs + 4 * k, 8);
      const __m256 db = _mm256_set1_ps(d * (0.5f + static_cast<float>(a[1] >> 28)) * 0.25f);
      for (int g = 0; g < 4; ++g) {
        const __m128i grid = _mm_cvtsi64_si128(
            static_cast<long long>(kIq2xxs.grid[(a[0] >> (8 * g)) & 255]));
        const __m128i signs = _mm_cvtsi64_si128(
            static_cast<long long>(kIq2xxs.sign_bytes[(a[1] >> (7 * g)) & 127]));
        const __m256 v = _mm256_mul_ps(db, u8x8_to_ps(grid));
        const __m256i flip = _mm256_and_si256(_mm256_cvtepi8_epi32(signs), sign_bit);
        _mm256_storeu_ps(dst + b * kQK_K + 32 * k + 8 * g,
                         _mm256_xor_ps(v, _mm256_castsi256_ps(flip)));
      }
    }
  }
}

}  // namespace ds4::quant::avx2
