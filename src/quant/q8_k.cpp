// Scalar reference for the Q8_K activation format (spec §5.6, ds4 `ds4_quantize_row_q8_K`).
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/reference.h"
#include "quant/scalar_math.h"

namespace ds4::quant::ref {

void quantize_q8_k(const float* x, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* xb = x + i * kQK_K;
    BlockQ8_K& y = out[i];
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {  // strict: the first element of largest magnitude wins
        amax = ax;
        max = xb[j];
      }
    }
    const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
    if (amax == 0.0f || std::isinf(iscale)) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    for (int j = 0; j < kQK_K; ++j) y.qs[j] = round_clamp_i8(iscale * xb[j]);
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y.qs[16 * g + j];
      y.bsums[g] = static_cast<int16_t>(sum);
    }
    y.d = 1.0f / iscale;
  }
}

void dequant_q8_k(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    for (int j = 0; j < kQK_K; ++j) dst[i * kQK_K + j] = b[i].d * static_cast<float>(b[i].qs[j]);
  }
}

}  // namespace ds4::quant::ref
