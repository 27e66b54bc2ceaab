// Scalar reference for Q8_0 weights (spec §5.2) and Q8_0-style activations (spec §3.1).
#include <cmath>

#include "common/f16.h"
#include "quant/blocks.h"
#include "quant/reference.h"
#include "quant/scalar_math.h"

namespace ds4::quant::ref {

namespace {

int32_t dot_i8_32(const int8_t* a, const int8_t* b) {
  int32_t s = 0;
  for (int i = 0; i < kQK8_0; ++i) s += static_cast<int32_t>(a[i]) * b[i];
  return s;
}

}  // namespace

float dot_q8_0(const void* w, const void* act, int64_t n) {
  const auto* wb = static_cast<const BlockQ8_0*>(w);
  const auto* xb = static_cast<const BlockQ8_0Act*>(act);
  const int64_t nb = n / kQK8_0;
  float acc[8] = {};
  for (int64_t base = 0; base < nb; base += 8) {
    for (int l = 0; l < 8; ++l) {
      const int64_t b = base + l;
      float s = 0.0f;
      if (b < nb) {
        const float scale = f16_to_f32(wb[b].d) * xb[b].d;
        s = scale * static_cast<float>(dot_i8_32(wb[b].qs, xb[b].qs));
      }
      acc[l] = acc[l] + s;
    }
  }
  return reduce_lanes8(acc);
}

void dequant_q8_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK8_0; ++j) dst[i * kQK8_0 + j] = d * static_cast<float>(b[i].qs[j]);
  }
}

// Weight quantizer (gguf-tools quants.c:341): d = amax/127 (clamped to the largest f16 so huge
// inputs saturate), q = round-half-away(x * (1/d)) computed with the unrounded d, clamped.
void quantize_q8_0(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float* x = src + i * kQK8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = std::fmin(amax / 127.0f, kF16Max);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK8_0; ++j) {
      const float q = std::round(x[j] * id);
      out[i].qs[j] = static_cast<int8_t>(std::fmax(-127.0f, std::fmin(127.0f, q)));
    }
  }
}

void quantize_q8_0_act(const float* x, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_0Act*>(dst);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float* xb = x + i * kQK8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) amax = ax;  // NaN never wins
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    if (std::isinf(id)) {  // max|x| < 127/FLT_MAX: store a zero block (see quant.h)
      out[i].d = 0.0f;
      for (int j = 0; j < kQK8_0; ++j) out[i].qs[j] = 0;
      continue;
    }
    out[i].d = d;
    for (int j = 0; j < kQK8_0; ++j) out[i].qs[j] = round_clamp_i8(xb[j] * id);
  }
}

}  // namespace ds4::quant::ref
