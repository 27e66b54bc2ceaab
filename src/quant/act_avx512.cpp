// AVX-512 activation quantizers (Q8_0-style and Q8_K), bit-identical to the ref:: versions.
// ISA-specific translation unit: uses only intrinsics and functions with internal linkage.
// GCC 12's AVX-512 headers self-initialize `_mm512_undefined_*` values, which trips
// -W(maybe-)uninitialized after inlining (GCC PR105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/simd.h"

namespace ds4::quant::avx512 {

namespace {

// max(|v|, m) lane-wise; a NaN |v| keeps m.
__m512 max_abs(__m512 v, __m512 m) {
  return _mm512_max_ps(_mm512_abs_ps(v), m);  // returns the second operand when one is NaN
}

// 16 scaled floats -> int8 codes as ref::round_clamp_i8 (NaN -> -128, saturate, nearest even).
__m128i round_i8x16(__m512 v) {
  const __m512 c = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-128.0f)), _mm512_set1_ps(127.0f));
  return _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(c));
}

}  // namespace

void quantize_q8_0_act(const float* x, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_0Act*>(dst);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const __m512 v0 = _mm512_loadu_ps(x + i * kQK8_0);
    const __m512 v1 = _mm512_loadu_ps(x + i * kQK8_0 + 16);
    const __m512 m = max_abs(v1, max_abs(v0, _mm512_setzero_ps()));
    const float d = _mm512_reduce_max_ps(m) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    if (__builtin_isinf(id)) {
      std::memset(&out[i], 0, sizeof(out[i]));
      continue;
    }
    out[i].d = d;
    const __m512 vid = _mm512_set1_ps(id);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[i].qs), round_i8x16(_mm512_mul_ps(v0, vid)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[i].qs + 16),
                     round_i8x16(_mm512_mul_ps(v1, vid)));
  }
}

void quantize_q8_k(const float* x, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* xb = x + i * kQK_K;
    BlockQ8_K& y = out[i];
    __m512 m = _mm512_setzero_ps();
    for (int j = 0; j < kQK_K; j += 16) m = max_abs(_mm512_loadu_ps(xb + j), m);
    const float amax = _mm512_reduce_max_ps(m);
    if (amax == 0.0f) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    const __m512 vamax = _mm512_set1_ps(amax);
    int first = 0;
    for (int j = 0; j < kQK_K; j += 16) {
      const __mmask16 k =
          _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(xb + j)), vamax, _CMP_EQ_OQ);
      if (k != 0) {
        first = j + __builtin_ctz(static_cast<unsigned>(k));
        break;
      }
    }
    const float iscale = -127.0f / xb[first];
    if (__builtin_isinf(iscale)) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    const __m512 vs = _mm512_set1_ps(iscale);
    for (int j = 0; j < kQK_K; j += 16) {
      const __m512 c = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(xb + j), vs),
                                                   _mm512_set1_ps(-128.0f)),
                                     _mm512_set1_ps(127.0f));
      const __m512i q = _mm512_cvtps_epi32(c);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y.qs + j), _mm512_cvtsepi32_epi8(q));
      y.bsums[j / 16] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
    }
    y.d = 1.0f / iscale;
  }
}

}  // namespace ds4::quant::avx512
