// Internal helpers for the *_avx2.cpp / *_avx512.cpp kernels only (needs AVX2 + F16C). Every
// function is `static inline` so each ISA-specific translation unit gets its own copy and no
// vector code can leak into generic code through a shared inline definition.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace ds4::quant::simd {

/// f16 bits -> f32 (exact, F16C).
static inline float f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }

/// Horizontal sum of 8 int32 lanes (exact).
static inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

/// [hsum(v[0]), ..., hsum(v[7])] as 8 int32 lanes (exact).
static inline __m256i hsum_8x8(const __m256i* v) {
  const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]);
  const __m256i h23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]);
  const __m256i h67 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i h0123 = _mm256_hadd_epi32(h01, h23);  // [v0..v3 low halves | high halves]
  const __m256i h4567 = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20),
                          _mm256_permute2x128_si256(h0123, h4567, 0x31));
}

/// reduce_lanes8 of the reference: (l, l+4), (l, l+2), (0, 1).
static inline float reduce_lanes8(__m256 acc) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

/// Sum over 32 byte lanes of w[i] * x[i] as 8 int32 partial sums, exact when every x[i] is in
/// [-127, 127] (w may be any int8): |w| (unsigned) times x with w's sign.
static inline __m256i dot_i8x32(__m256i w, __m256i x) {
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/// Rounds 32 floats (4 vectors, already multiplied by the inverse scale) to int8 codes the way
/// ref::round_clamp_i8 does: max(v, -128) (NaN -> -128), min(., 127), round to nearest even,
/// returned in element order.
static inline __m256i round_pack_i8x32(__m256 v0, __m256 v1, __m256 v2, __m256 v3) {
  const __m256 lo = _mm256_set1_ps(-128.0f);
  const __m256 hi = _mm256_set1_ps(127.0f);
  const __m256i q0 = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v0, lo), hi));
  const __m256i q1 = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v1, lo), hi));
  const __m256i q2 = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v2, lo), hi));
  const __m256i q3 = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v3, lo), hi));
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/// max(|v|, m) lane-wise, where a NaN |v| keeps m (like the reference's `if (ax > amax)`).
static inline __m256 max_abs(__m256 v, __m256 m) {
  const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
  return _mm256_max_ps(a, m);  // returns m when a is NaN
}

/// Horizontal max of 8 non-NaN lanes.
static inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

/// Q2_K: sum over the 16 sub-blocks of min_j * bsum_j (the block's min correction, exact).
static inline int32_t q2_k_min_sum(const uint8_t* scales, const int16_t* bsums) {
  const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales));
  const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(0x0f)));
  const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsums));
  return hsum_i32(_mm256_madd_epi16(bs, mins));
}

/// IQ2_XXS: sub-block k's 32 grid magnitudes and sign bytes (0xff = negative, 0 = positive)
/// from its 8 bytes `a` (4 grid indices, then 4 x 7 sign bits and a 4-bit scale).
static inline void iq2_xxs_gather(const uint32_t a[2], const uint64_t* grid,
                                  const uint64_t* sign_bytes, __m256i* g, __m256i* sign) {
  *g = _mm256_set_epi64x(static_cast<long long>(grid[a[0] >> 24]),
                         static_cast<long long>(grid[(a[0] >> 16) & 255]),
                         static_cast<long long>(grid[(a[0] >> 8) & 255]),
                         static_cast<long long>(grid[a[0] & 255]));
  *sign = _mm256_set_epi64x(static_cast<long long>(sign_bytes[(a[1] >> 21) & 127]),
                            static_cast<long long>(sign_bytes[(a[1] >> 14) & 127]),
                            static_cast<long long>(sign_bytes[(a[1] >> 7) & 127]),
                            static_cast<long long>(sign_bytes[a[1] & 127]));
}

}  // namespace ds4::quant::simd
