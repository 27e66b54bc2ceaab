// AVX2 dot products of quantized weight rows with quantized activations. Integer parts are
// exact; the float combination follows the reference order (see quant::vec_dot), so results
// are bit-identical to ref::. Activation codes must be in [-127, 127].
// ISA-specific translation unit: uses only intrinsics and functions with internal linkage.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/avx2_util.h"
#include "quant/blocks.h"
#include "quant/iq2xxs_tables.h"
#include "quant/mxfp4_tables.h"
#include "quant/simd.h"

namespace ds4::quant::avx2 {

namespace {

using simd::f16_to_f32;

// Shared driver of the 32-element formats: lane l of the float accumulator holds blocks
// b = l mod 8; `block(b, isum_vec*, scale*)` yields block b's 8 int32 partial sums and its
// scale_w * d_x. Missing blocks of the last group contribute +0 (scale 0 times isum 0).
template <typename Block>
float dot_blocks32(int64_t nb, Block block) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t base = 0; base < nb; base += 8) {
    __m256i parts[8];
    alignas(32) float scale[8];
    for (int l = 0; l < 8; ++l) {
      if (base + l < nb) {
        block(base + l, &parts[l], &scale[l]);
      } else {
        parts[l] = _mm256_setzero_si256();
        scale[l] = 0.0f;
      }
    }
    const __m256 isum = _mm256_cvtepi32_ps(simd::hsum_8x8(parts));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_load_ps(scale), isum));
  }
  return simd::reduce_lanes8(acc);
}


}  // namespace

float dot_q8_0(const void* w, const void* act, int64_t n) {
  const auto* wb = static_cast<const BlockQ8_0*>(w);
  const auto* xb = static_cast<const BlockQ8_0Act*>(act);
  return dot_blocks32(n / kQK8_0, [&](int64_t b, __m256i* part, float* scale) {
    const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[b].qs));
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[b].qs));
    *part = simd::dot_i8x32(wq, xq);
    *scale = f16_to_f32(wb[b].d) * xb[b].d;
  });
}

float dot_mxfp4(const void* w, const void* act, int64_t n) {
  const auto* wb = static_cast<const BlockMxfp4*>(w);
  const auto* xb = static_cast<const BlockQ8_0Act*>(act);
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4.doubled));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  return dot_blocks32(n / kQKMxfp4, [&](int64_t b, __m256i* part, float* scale) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb[b].qs));
    const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(q, m4));
    const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[b].qs));
    *part = simd::dot_i8x32(_mm256_set_m128i(hi, lo), xq);
    *scale = kMxfp4.half_scale[wb[b].e] * xb[b].d;
  });
}

float dot_q2_k(const void* w, const void* act, int64_t n) {
  const auto* wb = static_cast<const BlockQ2_K*>(w);
  const auto* yb = static_cast<const BlockQ8_K*>(act);
  const __m256i m3 = _mm256_set1_epi8(3);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ2_K& x = wb[b];
    const BlockQ8_K& y = yb[b];
    const int32_t summs = simd::q2_k_min_sum(x.scales, y.bsums);

    __m256i isum = _mm256_setzero_si256();
    for (int k = 0; k < 2; ++k) {
      const __m256i q2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * k));
      for (int s = 0; s < 4; ++s) {
        const int j0 = 8 * k + 2 * s;  // sub-blocks j0 (bytes 0-15) and j0 + 1 (bytes 16-31)
        const __m256i codes = _mm256_and_si256(_mm256_srli_epi16(q2, 2 * s), m3);
        const __m256i yq =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 128 * k + 32 * s));
        const __m256i p16 = _mm256_maddubs_epi16(codes, yq);
        const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(x.scales[j0 + 1] & 15),
                                            _mm_set1_epi16(x.scales[j0] & 15));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p16, sc));
      }
    }
    const float dall = y.d * f16_to_f32(x.d);
    const float dmin = y.d * f16_to_f32(x.dmin);
    sum = sum + (dall * static_cast<float>(simd::hsum_i32(isum)) -
                 dmin * static_cast<float>(summs));
  }
  return sum;
}

float dot_q4_k(const void* w, const void* act, int64_t n) {
  const auto* wb = static_cast<const BlockQ4_K*>(w);
  const auto* yb = static_cast<const BlockQ8_K*>(act);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K& x = wb[b];
    const BlockQ8_K& y = yb[b];
    int sc[8], mn[8];
    int32_t summs = 0;
    for (int j = 0; j < 8; ++j) {
      scale_min_k4(j, x.scales, &sc[j], &mn[j]);
      summs += mn[j] * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
    }
    __m256i isum = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q4 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * c));
      const __m256i lo = _mm256_and_si256(q4, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
      const __m256i y_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * c));
      const __m256i y_hi =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * c + 32));
      const __m256i p_lo = _mm256_maddubs_epi16(lo, y_lo);
      const __m256i p_hi = _mm256_maddubs_epi16(hi, y_hi);
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p_lo, _mm256_set1_epi16(
                                                              static_cast<int16_t>(sc[2 * c]))));
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p_hi, _mm256_set1_epi16(static_cast<int16_t>(
                                                                  sc[2 * c + 1]))));
    }
    const float dall = y.d * f16_to_f32(x.d);
    const float dmin = y.d * f16_to_f32(x.dmin);
    sum = sum + (dall * static_cast<float>(simd::hsum_i32(isum)) -
                 dmin * static_cast<float>(summs));
  }
  return sum;
}

float dot_iq2_xxs(const void* w, const void* act, int64_t n) {
  const auto* wb = static_cast<const BlockIq2Xxs*>(w);
  const auto* yb = static_cast<const BlockQ8_K*>(act);
  const __m256i one = _mm256_set1_epi8(1);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    __m256i acc = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k) {
      uint32_t a[2];
      std::memcpy(a, wb[b].qs + 4 * k, 8);
      const uint64_t* grid = kIq2xxs.grid;
      const uint64_t* sb = kIq2xxs.sign_bytes;
      __m256i g, sign;
      simd::iq2_xxs_gather(a, grid, sb, &g, &sign);
      const __m256i yq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb[b].qs + 32 * k));
      // 0xff lanes negate y, 0x01 lanes keep it (y in [-127, 127] cannot overflow).
      const __m256i sy = _mm256_sign_epi8(yq, _mm256_or_si256(sign, one));
      const __m256i p16 = _mm256_maddubs_epi16(g, sy);
      const auto ls = static_cast<int16_t>(2 * (a[1] >> 28) + 1);
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(ls)));
    }
    const float d = f16_to_f32(wb[b].d) * yb[b].d;
    sum = sum + d * static_cast<float>(simd::hsum_i32(acc));
  }
  return 0.125f * sum;
}

}  // namespace ds4::quant::avx2
