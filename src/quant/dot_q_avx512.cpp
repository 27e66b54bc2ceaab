// AVX-512 (BW/VL/VNNI) dot products of quantized weight rows with quantized activations.
// Integer parts are exact (VNNI dpbusd/dpwssd, no saturation); the float combination follows
// the reference order, so results are bit-identical to ref::. Activation codes must be in
// [-127, 127].
// ISA-specific translation unit: uses only intrinsics and functions with internal linkage.
// GCC 12's AVX-512 headers self-initialize `_mm512_undefined_*` values, which trips
// -W(maybe-)uninitialized after inlining (GCC PR105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/avx2_util.h"
#include "quant/blocks.h"
#include "quant/iq2xxs_tables.h"
#include "quant/mxfp4_tables.h"
#include "quant/simd.h"

namespace ds4::quant::avx512 {

namespace {

using simd::f16_to_f32;

__m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

__m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Two blocks' signed byte dots (w any int8, x in [-127, 127]) as 8 int32 partial sums each.
void dot_pair(__m256i w0, __m256i x0, __m256i w1, __m256i x1, __m256i* p0, __m256i* p1) {
  const __m512i w = join(w0, w1);
  const __m512i x = join(x0, x1);
  const __m512i sx = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
  const __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(w), sx);
  *p0 = _mm512_castsi512_si256(dp);
  *p1 = _mm512_extracti64x4_epi64(dp, 1);
}

// Driver shared by the 32-element formats (same lane order as the reference): `load(b, &w,
// &x, &scale)` gives block b's 32 weight codes, 32 activation codes and scale_w * d_x.
// Missing blocks of the last group are zero codes with scale 0 (they add +0).
template <typename Load>
float dot_blocks32(int64_t nb, Load load) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t base = 0; base < nb; base += 8) {
    __m256i wv[8], xv[8], parts[8];
    alignas(32) float scale[8];
    for (int l = 0; l < 8; ++l) {
      if (base + l < nb) {
        load(base + l, &wv[l], &xv[l], &scale[l]);
      } else {
        wv[l] = xv[l] = _mm256_setzero_si256();
        scale[l] = 0.0f;
      }
    }
    for (int l = 0; l < 8; l += 2) dot_pair(wv[l], xv[l], wv[l + 1], xv[l + 1], &parts[l], &parts[l + 1]);
    const __m256 isum = _mm256_cvtepi32_ps(simd::hsum_8x8(parts));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_load_ps(scale), isum));
  }
  return simd::reduce_lanes8(acc);
}

// [a x16 | b x16] as 32 int16 lanes.
__m512i splat2_epi16(int a, int b) {
  return join(_mm256_set1_epi16(static_cast<int16_t>(a)), _mm256_set1_epi16(static_cast<int16_t>(b)));
}

// [a x8 | b x8 | c x8 | d x8] as 32 int16 lanes.
__m512i splat4_epi16(int a, int b, int c, int d) {
  return join(_mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(b)), _mm_set1_epi16(static_cast<int16_t>(a))),
              _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(d)), _mm_set1_epi16(static_cast<int16_t>(c))));
}


}  // namespace

float dot_q8_0(const void* w, const void* act, int64_t n) {
  const auto* wb = static_cast<const BlockQ8_0*>(w);
  const auto* xb = static_cast<const BlockQ8_0Act*>(act);
  return dot_blocks32(n / kQK8_0, [&](int64_t b, __m256i* wq, __m256i* xq, float* scale) {
    *wq = load32(wb[b].qs);
    *xq = load32(xb[b].qs);
    *scale = f16_to_f32(wb[b].d) * xb[b].d;
  });
}

float dot_mxfp4(const void* w, const void* act, int64_t n) {
  const auto* wb = static_cast<const BlockMxfp4*>(w);
  const auto* xb = static_cast<const BlockQ8_0Act*>(act);
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4.doubled));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  return dot_blocks32(n / kQKMxfp4, [&](int64_t b, __m256i* wq, __m256i* xq, float* scale) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb[b].qs));
    const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(q, m4));
    const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
    *wq = _mm256_set_m128i(hi, lo);
    *xq = load32(xb[b].qs);
    *scale = kMxfp4.half_scale[wb[b].e] * xb[b].d;
  });
}

float dot_q2_k(const void* w, const void* act, int64_t n) {
  const auto* wb = static_cast<const BlockQ2_K*>(w);
  const auto* yb = static_cast<const BlockQ8_K*>(act);
  const __m512i m3 = _mm512_set1_epi8(3);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ2_K& x = wb[b];
    const BlockQ8_K& y = yb[b];
    const int32_t summs = simd::q2_k_min_sum(x.scales, y.bsums);

    // Bytes 0-31 of qs serve elements 32s + l, bytes 32-63 elements 128 + 32s + l.
    const __m512i q2 = _mm512_loadu_si512(x.qs);
    __m512i acc = _mm512_setzero_si512();
    for (int s = 0; s < 4; ++s) {
      const __m512i codes = _mm512_and_si512(_mm512_srli_epi16(q2, 2 * s), m3);
      const __m512i yq = join(load32(y.qs + 32 * s), load32(y.qs + 128 + 32 * s));
      const __m512i p16 = _mm512_maddubs_epi16(codes, yq);
      const __m512i sc = splat4_epi16(x.scales[2 * s] & 15, x.scales[2 * s + 1] & 15,
                                      x.scales[8 + 2 * s] & 15, x.scales[9 + 2 * s] & 15);
      acc = _mm512_dpwssd_epi32(acc, p16, sc);
    }
    const float dall = y.d * f16_to_f32(x.d);
    const float dmin = y.d * f16_to_f32(x.dmin);
    sum = sum + (dall * static_cast<float>(_mm512_reduce_add_epi32(acc)) -
                 dmin * static_cast<float>(summs));
  }
  return sum;
}

float dot_q4_k(const void* w, const void* act, int64_t n) {
  const auto* wb = static_cast<const BlockQ4_K*>(w);
  const auto* yb = static_cast<const BlockQ8_K*>(act);
  const __m512i m4 = _mm512_set1_epi8(0x0f);
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
    __m512i acc = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      // qs bytes 64h .. 64h+63: low nibbles are sub-blocks 4h (bytes 0-31) and 4h+2 (32-63),
      // high nibbles sub-blocks 4h+1 and 4h+3.
      const __m512i q4 = _mm512_loadu_si512(x.qs + 64 * h);
      const __m512i lo = _mm512_and_si512(q4, m4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q4, 4), m4);
      const int8_t* yq = y.qs + 128 * h;
      const __m512i y_lo = join(load32(yq), load32(yq + 64));
      const __m512i y_hi = join(load32(yq + 32), load32(yq + 96));
      acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(lo, y_lo),
                                splat2_epi16(sc[4 * h], sc[4 * h + 2]));
      acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(hi, y_hi),
                                splat2_epi16(sc[4 * h + 1], sc[4 * h + 3]));
    }
    const float dall = y.d * f16_to_f32(x.d);
    const float dmin = y.d * f16_to_f32(x.dmin);
    sum = sum + (dall * static_cast<float>(_mm512_reduce_add_epi32(acc)) -
                 dmin * static_cast<float>(summs));
  }
  return sum;
}

float dot_iq2_xxs(const void* w, const void* act, int64_t n) {
  // One sub-block (32 weights) per ymm, as in the AVX2 kernel: grid points and sign bytes come
  // from 8-byte table entries; VNNI dpwssd applies the sub-block scale and accumulates.
  const auto* wb = static_cast<const BlockIq2Xxs*>(w);
  const auto* yb = static_cast<const BlockQ8_K*>(act);
  const uint64_t* grid = kIq2xxs.grid;
  const uint64_t* sb = kIq2xxs.sign_bytes;
  const __m256i one = _mm256_set1_epi8(1);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    __m256i acc = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k) {
      uint32_t a[2];
      std::memcpy(a, wb[b].qs + 4 * k, 8);
      __m256i g, sign;
      simd::iq2_xxs_gather(a, grid, sb, &g, &sign);
      const __m256i yq = load32(yb[b].qs + 32 * k);
      // 0xff lanes negate y, 0x01 lanes keep it (y in [-127, 127] cannot overflow).
      const __m256i sy = _mm256_sign_epi8(yq, _mm256_or_si256(sign, one));
      const auto ls = static_cast<int16_t>(2 * (a[1] >> 28) + 1);
      acc = _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(g, sy), _mm256_set1_epi16(ls));
    }
    const float d = f16_to_f32(wb[b].d) * yb[b].d;
    sum = sum + d * static_cast<float>(simd::hsum_i32(acc));
  }
  return 0.125f * sum;
}

}  // namespace ds4::quant::avx512
