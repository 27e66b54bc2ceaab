// Scalar reference for MXFP4 (GGUF type 39): dequantize, quantize, dot with Q8_0-style
// activations. Element order and scaling as ggml: element j < 16 is the low nibble of qs[j],
// element j + 16 the high nibble; value = doubled_e2m1[code] * 2^(e - 128).
#include <cmath>
#include <limits>

#include "quant/blocks.h"
#include "quant/mxfp4_tables.h"
#include "quant/reference.h"
#include "quant/scalar_math.h"

namespace ds4::quant::ref {

namespace {

int code_at(const BlockMxfp4& x, int j) {
  return j < 16 ? (x.qs[j] & 15) : (x.qs[j - 16] >> 4);
}

// Nearest code to v for half-scale h (ties keep the smaller magnitude); codes whose value
// overflows f32 are skipped. Returns the squared error through *err.
int nearest_code(float v, float h, double* err) {
  const int sign = v < 0.0f ? 8 : 0;
  const double av = std::fabs(static_cast<double>(v));
  int best = 0;
  double best_e = std::numeric_limits<double>::infinity();
  for (int c = 0; c < 8; ++c) {
    const float value = static_cast<float>(kMxfp4.doubled[c]) * h;
    if (std::isinf(value)) break;
    const double e = std::fabs(av - value);
    if (e < best_e) {
      best_e = e;
      best = c;
    }
  }
  *err = best_e * best_e;
  return best == 0 ? 0 : (best | sign);  // zero is always stored as +0
}

double block_error(const float* x, int e) {
  double total = 0.0;
  for (int j = 0; j < kQKMxfp4; ++j) {
    double err;
    nearest_code(x[j], kMxfp4.half_scale[e], &err);
    total += err;
  }
  return total;
}

}  // namespace

void dequant_mxfp4(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockMxfp4*>(src);
  for (int64_t b = 0; b < n / kQKMxfp4; ++b) {
    const float h = kMxfp4.half_scale[blocks[b].e];
    for (int j = 0; j < kQKMxfp4; ++j) {
      dst[b * kQKMxfp4 + j] = static_cast<float>(kMxfp4.doubled[code_at(blocks[b], j)]) * h;
    }
  }
}

// Exponent: e_hi is the smallest e with 12 * 2^(e-128) >= max|x| (no clipping); e_hi - 1 trades
// clipping of the largest element for finer steps. The one with the lower squared error wins
// (e_hi on ties). e stays within [0, 254].
void quantize_mxfp4(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockMxfp4*>(dst);
  for (int64_t b = 0; b < n / kQKMxfp4; ++b) {
    const float* x = src + b * kQKMxfp4;
    double amax = 0.0;
    for (int j = 0; j < kQKMxfp4; ++j) amax = std::fmax(amax, std::fabs(static_cast<double>(x[j])));
    int e = 0;
    while (e < 254 && 12.0 * std::ldexp(1.0, e - 128) < amax) ++e;
    if (e > 0 && block_error(x, e - 1) < block_error(x, e)) --e;
    BlockMxfp4& y = blocks[b];
    y.e = static_cast<uint8_t>(e);
    for (int j = 0; j < 16; ++j) {
      double err;
      const int lo = nearest_code(x[j], kMxfp4.half_scale[e], &err);
      const int hi = nearest_code(x[j + 16], kMxfp4.half_scale[e], &err);
      y.qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

float dot_mxfp4(const void* w, const void* act, int64_t n) {
  const auto* wb = static_cast<const BlockMxfp4*>(w);
  const auto* xb = static_cast<const BlockQ8_0Act*>(act);
  const int64_t nb = n / kQKMxfp4;
  float acc[8] = {};
  for (int64_t base = 0; base < nb; base += 8) {
    for (int l = 0; l < 8; ++l) {
      const int64_t b = base + l;
      float s = 0.0f;
      if (b < nb) {
        int32_t isum = 0;
        for (int j = 0; j < kQKMxfp4; ++j) isum += kMxfp4.doubled[code_at(wb[b], j)] * xb[b].qs[j];
        s = (kMxfp4.half_scale[wb[b].e] * xb[b].d) * static_cast<float>(isum);
      }
      acc[l] = acc[l] + s;
    }
  }
  return reduce_lanes8(acc);
}

}  // namespace ds4::quant::ref
