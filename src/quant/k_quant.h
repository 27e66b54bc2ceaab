// Internal: the scale/min search shared by the Q2_K and Q4_K reference quantizers. Each
// sub-block is modelled as x ~= scale * q + min with integer q in [0, nmax], scale >= 0 and
// min <= 0 (the formats store -min as a non-negative "mn"); the per-sub-block scales and mins
// are then coded as integers in [0, ncode] times two f16 super-scales d and dmin.
#pragma once

#include <cstdint>

namespace ds4::quant::ref {

/// Result of fitting one sub-block.
struct ScaleMin {
  float scale;  ///< >= 0
  float min;    ///< <= 0
};

/// Least-squares fit of x[0..n) to scale * q + min: tries 21 initial quantization grids over
/// [min(x, 0), max(x)] (like ggml's make_qkx search), refits scale and min by least squares on
/// each grid's codes (min forced <= 0) and keeps the fit of lowest squared error.
ScaleMin fit_scale_min(const float* x, int n, int nmax);

/// Codes of one K-quant super-block.
struct KBlockCodes {
  uint16_t d;       ///< f16 super-scale of the scales
  uint16_t dmin;    ///< f16 super-scale of the mins
  uint8_t sc[16];   ///< per sub-block scale code, 0..ncode
  uint8_t mn[16];   ///< per sub-block min code, 0..ncode
  uint8_t q[256];   ///< per element code, 0..nmax
};

/// Quantizes nsub * sub_len elements: fits every sub-block, sets d = max scale / ncode and
/// dmin = max(-min) / ncode (clamped to 65504, rounded to f16), then for each sub-block picks the
/// (sc, mn) pair near scale/d and -min/dmin with the lowest reconstruction error, and finally
/// the element codes q = clamp(round((x + dmin*mn) / (d*sc)), 0, nmax).
KBlockCodes quantize_k_block(const float* x, int nsub, int sub_len, int nmax, int ncode);

}  // namespace ds4::quant::ref
