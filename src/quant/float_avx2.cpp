// AVX2 (+FMA, F16C) kernels for plain float rows: F32/F16/BF16 dots and F16/BF16 widening.
// Bit-identical to ref:: (float_rows.cpp): the 16 canonical lanes are two 8-lane accumulators
// (lanes 0-7, 8-15), products and sums are rounded separately (no FMA).
// ISA-specific translation unit: uses only intrinsics and functions with internal linkage.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/simd.h"

namespace ds4::quant::avx2 {

namespace {

// reduce_lanes16: (l, l+8), (l, l+4), (l, l+2), (0, 1).
float reduce16(__m256 lo, __m256 hi) {
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

__m256 widen_f32(const float* p) { return _mm256_loadu_ps(p); }
__m256 widen_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
__m256 widen_bf16(const uint16_t* p) {
  const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

// The partial last chunk is copied into zero-padded buffers: padded products are +0, exactly
// what the reference adds.
template <typename T, typename Widen>
float dot16(const T* w, const float* x, int64_t n, Widen widen) {
  __m256 lo = _mm256_setzero_ps();
  __m256 hi = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    lo = _mm256_add_ps(lo, _mm256_mul_ps(widen(w + i), _mm256_loadu_ps(x + i)));
    hi = _mm256_add_ps(hi, _mm256_mul_ps(widen(w + i + 8), _mm256_loadu_ps(x + i + 8)));
  }
  if (i < n) {
    T wt[16] = {};
    float xt[16] = {};
    std::memcpy(wt, w + i, static_cast<size_t>(n - i) * sizeof(T));
    std::memcpy(xt, x + i, static_cast<size_t>(n - i) * sizeof(float));
    lo = _mm256_add_ps(lo, _mm256_mul_ps(widen(wt), _mm256_loadu_ps(xt)));
    hi = _mm256_add_ps(hi, _mm256_mul_ps(widen(wt + 8), _mm256_loadu_ps(xt + 8)));
  }
  return reduce16(lo, hi);
}

template <typename Widen>
void widen_row(const uint16_t* src, float* dst, int64_t n, Widen widen) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, widen(src + i));
  if (i < n) {
    uint16_t t[8] = {};
    float out[8];
    std::memcpy(t, src + i, static_cast<size_t>(n - i) * 2);
    _mm256_storeu_ps(out, widen(t));
    std::memcpy(dst + i, out, static_cast<size_t>(n - i) * 4);
  }
}

}  // namespace

float dot_f32(const void* w, const void* x, int64_t n) {
  return dot16(static_cast<const float*>(w), static_cast<const float*>(x), n, widen_f32);
}

float dot_f16(const void* w, const void* x, int64_t n) {
  return dot16(static_cast<const uint16_t*>(w), static_cast<const float*>(x), n, widen_f16);
}

float dot_bf16(const void* w, const void* x, int64_t n) {
  return dot16(static_cast<const uint16_t*>(w), static_cast<const float*>(x), n, widen_bf16);
}

void dequant_f16(const void* src, float* dst, int64_t n) {
  widen_row(static_cast<const uint16_t*>(src), dst, n, widen_f16);
}

void dequant_bf16(const void* src, float* dst, int64_t n) {
  widen_row(static_cast<const uint16_t*>(src), dst, n, widen_bf16);
}

}  // namespace ds4::quant::avx2
