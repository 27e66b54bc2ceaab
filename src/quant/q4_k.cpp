// Scalar reference for Q4_K (spec §5.4): dequantize, quantize, dot with Q8_K activations
// (same structure as ds4's Q2_K dot and its CUDA `dev_dot_q4_K_q8_K_block`).
#include <cstring>

#include "common/f16.h"
#include "quant/blocks.h"
#include "quant/k_quant.h"
#include "quant/reference.h"

namespace ds4::quant::ref {

namespace {


// Element i's 4-bit code: sub-block j = i/32 uses the low (j even) or high (j odd) nibble of
// qs[32*(j/2) + i%32].
int code_q4(const uint8_t* qs, int i) {
  const int j = i / 32;
  return (qs[32 * (j / 2) + i % 32] >> (4 * (j & 1))) & 15;
}

}  // namespace

void dequant_q4_k(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K& x = blocks[b];
    const float d = f16_to_f32(x.d);
    const float dmin = f16_to_f32(x.dmin);
    for (int j = 0; j < 8; ++j) {
      int sc, mn;
      scale_min_k4(j, x.scales, &sc, &mn);
      const float dl = d * static_cast<float>(sc);
      const float ml = dmin * static_cast<float>(mn);
      for (int t = 0; t < 32; ++t) {
        const int i = 32 * j + t;
        dst[b * kQK_K + i] = dl * static_cast<float>(code_q4(x.qs, i)) - ml;
      }
    }
  }
}

void quantize_q4_k(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ4_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const KBlockCodes c = quantize_k_block(src + b * kQK_K, 8, 32, 15, 63);
    BlockQ4_K& y = blocks[b];
    std::memset(&y, 0, sizeof(y));
    y.d = c.d;
    y.dmin = c.dmin;
    for (int j = 0; j < 8; ++j) {
      const int sc = c.sc[j], mn = c.mn[j];
      if (j < 4) {
        y.scales[j] = static_cast<uint8_t>(y.scales[j] | sc);
        y.scales[j + 4] = static_cast<uint8_t>(y.scales[j + 4] | mn);
      } else {
        y.scales[j + 4] = static_cast<uint8_t>((sc & 15) | ((mn & 15) << 4));
        y.scales[j - 4] = static_cast<uint8_t>(y.scales[j - 4] | ((sc >> 4) << 6));
        y.scales[j] = static_cast<uint8_t>(y.scales[j] | ((mn >> 4) << 6));
      }
    }
    for (int i = 0; i < kQK_K; ++i) {
      const int j = i / 32;
      uint8_t& byte = y.qs[32 * (j / 2) + i % 32];
      byte = static_cast<uint8_t>(byte | (c.q[i] << (4 * (j & 1))));
    }
  }
}

float dot_q4_k(const void* w, const void* act, int64_t n) {
  const auto* wb = static_cast<const BlockQ4_K*>(w);
  const auto* yb = static_cast<const BlockQ8_K*>(act);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K& x = wb[b];
    const BlockQ8_K& y = yb[b];
    int32_t isum = 0;
    int32_t summs = 0;
    for (int j = 0; j < 8; ++j) {
      int sc, mn;
      scale_min_k4(j, x.scales, &sc, &mn);
      summs += mn * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
      int32_t sub = 0;
      for (int t = 0; t < 32; ++t) sub += code_q4(x.qs, 32 * j + t) * y.qs[32 * j + t];
      isum += sc * sub;
    }
    const float dall = y.d * f16_to_f32(x.d);
    const float dmin = y.d * f16_to_f32(x.dmin);
    sum = sum + (dall * static_cast<float>(isum) - dmin * static_cast<float>(summs));
  }
  return sum;
}

}  // namespace ds4::quant::ref
