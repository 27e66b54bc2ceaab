// Scalar reference for plain float rows: F32, F16, BF16 weights against f32 activations
// (spec §3.1 "Dense F16/F32 matvec", §5.1).
#include <cstring>

#include "common/f16.h"
#include "quant/reference.h"
#include "quant/scalar_math.h"

namespace ds4::quant::ref {

namespace {

// The canonical float-row dot: element i is added to lane i mod 16 (product rounded to f32,
// then the sum; no FMA), the last partial chunk is padded with +0 products, and the lanes are
// combined by reduce_lanes16. `load(i)` widens weight i to f32 exactly.
template <typename Load>
float dot_lanes16(Load load, const float* x, int64_t n) {
  float acc[16] = {};
  for (int64_t base = 0; base < n; base += 16) {
    for (int l = 0; l < 16; ++l) {
      const int64_t i = base + l;
      const float p = i < n ? load(i) * x[i] : 0.0f;
      acc[l] = acc[l] + p;
    }
  }
  return reduce_lanes16(acc);
}

}  // namespace

float dot_f32(const void* w, const void* x, int64_t n) {
  const auto* wf = static_cast<const float*>(w);
  return dot_lanes16([wf](int64_t i) { return wf[i]; }, static_cast<const float*>(x), n);
}

float dot_f16(const void* w, const void* x, int64_t n) {
  const auto* wh = static_cast<const uint16_t*>(w);
  return dot_lanes16([wh](int64_t i) { return f16_to_f32(wh[i]); }, static_cast<const float*>(x),
                     n);
}

float dot_bf16(const void* w, const void* x, int64_t n) {
  const auto* wb = static_cast<const uint16_t*>(w);
  return dot_lanes16([wb](int64_t i) { return bf16_to_f32(wb[i]); },
                     static_cast<const float*>(x), n);
}

void dequant_f16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
}

void dequant_bf16(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(b[i]);
}

void quantize_f16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
}

void quantize_bf16(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) b[i] = f32_to_bf16(src[i]);
}

}  // namespace ds4::quant::ref
