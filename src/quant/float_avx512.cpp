// AVX-512 kernels for plain float rows (F32/F16/BF16 dots, F16/BF16 widening) and Q8_0
// dequantization. Bit-identical to ref::: the 16 canonical lanes are one zmm accumulator, the
// tail uses masked loads (zeros, so padded products are +0), no FMA.
// ISA-specific translation unit: uses only intrinsics and functions with internal linkage.
// GCC 12's AVX-512 headers self-initialize `_mm512_undefined_*` values, which trips
// -W(maybe-)uninitialized after inlining (GCC PR105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cstdint>

#include "quant/avx2_util.h"
#include "quant/blocks.h"
#include "quant/simd.h"

namespace ds4::quant::avx512 {

namespace {

// reduce_lanes16: (l, l+8) then the 8-lane tree.
float reduce16(__m512 acc) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(acc),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
  return simd::reduce_lanes8(s8);
}

__mmask16 tail_mask(int64_t left) { return static_cast<__mmask16>((1u << left) - 1u); }

__m512 load_f32(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
__m512 load_f16(const uint16_t* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
__m512 load_bf16(const uint16_t* p, __mmask16 m) {
  const __m512i u = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}

template <typename T, typename Load>
float dot16(const T* w, const float* x, int64_t n, Load load) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc = _mm512_add_ps(acc, _mm512_mul_ps(load(w + i, 0xffff), _mm512_loadu_ps(x + i)));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    acc = _mm512_add_ps(acc, _mm512_mul_ps(load(w + i, m), _mm512_maskz_loadu_ps(m, x + i)));
  }
  return reduce16(acc);
}

template <typename Load>
void widen_row(const uint16_t* src, float* dst, int64_t n, Load load) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, load(src + i, 0xffff));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, load(src + i, m));
  }
}

}  // namespace

float dot_f32(const void* w, const void* x, int64_t n) {
  return dot16(static_cast<const float*>(w), static_cast<const float*>(x), n, load_f32);
}

float dot_f16(const void* w, const void* x, int64_t n) {
  return dot16(static_cast<const uint16_t*>(w), static_cast<const float*>(x), n, load_f16);
}

float dot_bf16(const void* w, const void* x, int64_t n) {
  return dot16(static_cast<const uint16_t*>(w), static_cast<const float*>(x), n, load_bf16);
}

void dequant_f16(const void* src, float* dst, int64_t n) {
  widen_row(static_cast<const uint16_t*>(src), dst, n, load_f16);
}

void dequant_bf16(const void* src, float* dst, int64_t n) {
  widen_row(static_cast<const uint16_t*>(src), dst, n, load_bf16);
}

void dequant_q8_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const __m512 d = _mm512_set1_ps(simd::f16_to_f32(b[i].d));
    for (int j = 0; j < kQK8_0; j += 16) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs + j));
      const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
      _mm512_storeu_ps(dst + i * kQK8_0 + j, _mm512_mul_ps(d, v));
    }
  }
}

}  // namespace ds4::quant::avx512
