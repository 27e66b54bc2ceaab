// AVX2 activation quantizers (Q8_0-style and Q8_K), bit-identical to ref::quantize_q8_0_act
// and ref::quantize_q8_k (same max search, same scale arithmetic, same rounding).
// ISA-specific translation unit: uses only intrinsics and functions with internal linkage.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/avx2_util.h"
#include "quant/blocks.h"
#include "quant/simd.h"

namespace ds4::quant::avx2 {

void quantize_q8_0_act(const float* x, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_0Act*>(dst);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float* xb = x + i * kQK8_0;
    const __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
    const __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
    __m256 m = _mm256_setzero_ps();
    m = simd::max_abs(v0, m);
    m = simd::max_abs(v1, m);
    m = simd::max_abs(v2, m);
    m = simd::max_abs(v3, m);
    const float d = simd::hmax(m) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    if (__builtin_isinf(id)) {  // tiny block: stored as zero (see quant.h)
      std::memset(&out[i], 0, sizeof(out[i]));
      continue;
    }
    out[i].d = d;
    const __m256 vid = _mm256_set1_ps(id);
    const __m256i q = simd::round_pack_i8x32(_mm256_mul_ps(v0, vid), _mm256_mul_ps(v1, vid),
                                             _mm256_mul_ps(v2, vid), _mm256_mul_ps(v3, vid));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[i].qs), q);
  }
}

void quantize_q8_k(const float* x, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_K*>(dst);
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* xb = x + i * kQK_K;
    BlockQ8_K& y = out[i];
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < kQK_K; j += 8) m = simd::max_abs(_mm256_loadu_ps(xb + j), m);
    const float amax = simd::hmax(m);
    if (amax == 0.0f) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    // The first element whose magnitude equals amax (the reference's strict `>` scan).
    const __m256 vamax = _mm256_set1_ps(amax);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    int first = 0;
    for (int j = 0; j < kQK_K; j += 8) {
      const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + j));
      const int mask = _mm256_movemask_ps(_mm256_cmp_ps(a, vamax, _CMP_EQ_OQ));
      if (mask != 0) {
        first = j + __builtin_ctz(static_cast<unsigned>(mask));
        break;
      }
    }
    const float iscale = -127.0f / xb[first];
    if (__builtin_isinf(iscale)) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    const __m256 vs = _mm256_set1_ps(iscale);
    for (int j = 0; j < kQK_K; j += 32) {
      const __m256i q = simd::round_pack_i8x32(
          _mm256_mul_ps(_mm256_loadu_ps(xb + j), vs), _mm256_mul_ps(_mm256_loadu_ps(xb + j + 8), vs),
          _mm256_mul_ps(_mm256_loadu_ps(xb + j + 16), vs),
          _mm256_mul_ps(_mm256_loadu_ps(xb + j + 24), vs));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y.qs + j), q);
      // Sums of the two 16-code groups: bytes -> pairs -> quads -> [s(0..15), .., s(16..31), ..].
      __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
      s = _mm256_hadd_epi32(s, s);
      s = _mm256_hadd_epi32(s, s);
      y.bsums[j / 16] = static_cast<int16_t>(_mm256_extract_epi32(s, 0));
      y.bsums[j / 16 + 1] = static_cast<int16_t>(_mm256_extract_epi32(s, 4));
    }
    y.d = 1.0f / iscale;
  }
}

}  // namespace ds4::quant::avx2
