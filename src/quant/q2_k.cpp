// Scalar reference for Q2_K (spec §5.3): dequantize, quantize, dot with Q8_K activations
// (ds4 `ds4_vec_dot_q2_K_q8_K`).
#include <cstring>

#include "common/f16.h"
#include "quant/blocks.h"
#include "quant/k_quant.h"
#include "quant/reference.h"

namespace ds4::quant::ref {

void dequant_q2_k(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ2_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ2_K& x = blocks[b];
    const float d = f16_to_f32(x.d);
    const float dmin = f16_to_f32(x.dmin);
    float* y = dst + b * kQK_K;
    for (int i = 0; i < kQK_K; ++i) {
      const int k = i / 128, s = (i % 128) / 32, l = i % 32;
      const int q = (x.qs[32 * k + l] >> (2 * s)) & 3;
      const uint8_t sc = x.scales[i / 16];
      const float dl = d * static_cast<float>(sc & 15);
      const float ml = dmin * static_cast<float>(sc >> 4);
      y[i] = dl * static_cast<float>(q) - ml;
    }
  }
}

void quantize_q2_k(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ2_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const KBlockCodes c = quantize_k_block(src + b * kQK_K, 16, 16, 3, 15);
    BlockQ2_K& y = blocks[b];
    std::memset(&y, 0, sizeof(y));
    y.d = c.d;
    y.dmin = c.dmin;
    for (int j = 0; j < 16; ++j) y.scales[j] = static_cast<uint8_t>(c.sc[j] | (c.mn[j] << 4));
    for (int i = 0; i < kQK_K; ++i) {
      const int k = i / 128, s = (i % 128) / 32, l = i % 32;
      y.qs[32 * k + l] = static_cast<uint8_t>(y.qs[32 * k + l] | (c.q[i] << (2 * s)));
    }
  }
}

float dot_q2_k(const void* w, const void* act, int64_t n) {
  const auto* wb = static_cast<const BlockQ2_K*>(w);
  const auto* yb = static_cast<const BlockQ8_K*>(act);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ2_K& x = wb[b];
    const BlockQ8_K& y = yb[b];
    int32_t summs = 0;
    for (int j = 0; j < 16; ++j) summs += y.bsums[j] * (x.scales[j] >> 4);
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {  // sub-block j = elements 16j .. 16j+15
      int32_t sub = 0;
      for (int t = 0; t < 16; ++t) {
        const int i = 16 * j + t;
        const int k = i / 128, s = (i % 128) / 32, l = i % 32;
        sub += ((x.qs[32 * k + l] >> (2 * s)) & 3) * y.qs[i];
      }
      isum += (x.scales[j] & 15) * sub;
    }
    const float dall = y.d * f16_to_f32(x.d);
    const float dmin = y.d * f16_to_f32(x.dmin);
    sum = sum + (dall * static_cast<float>(isum) - dmin * static_cast<float>(summs));
  }
  return sum;
}

}  // namespace ds4::quant::ref
