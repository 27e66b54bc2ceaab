// Internal helpers shared by the scalar reference kernels. Not for the ISA-specific
// translation units (they must not share inline functions with generic code).
#pragma once

#include <cmath>
#include <cstdint>

namespace ds4::quant::ref {

/// Round half to even (default FP rounding mode) and saturate to int8; NaN gives -128. Matches
/// the SIMD sequence max(v, -128) -> min(., 127) -> cvtps (round to nearest even).
inline int8_t round_clamp_i8(float v) {
  float c = v > -128.0f ? v : -128.0f;  // NaN fails the comparison -> -128
  c = c < 127.0f ? c : 127.0f;
  return static_cast<int8_t>(std::nearbyint(c));
}

/// Combines 16 lane sums with the fixed tree (l, l+8), (l, l+4), (l, l+2), (0, 1).
inline float reduce_lanes16(float* acc) {
  for (int l = 0; l < 8; ++l) acc[l] = acc[l] + acc[l + 8];
  for (int l = 0; l < 4; ++l) acc[l] = acc[l] + acc[l + 4];
  for (int l = 0; l < 2; ++l) acc[l] = acc[l] + acc[l + 2];
  return acc[0] + acc[1];
}

/// Combines 8 lane sums with the fixed tree (l, l+4), (l, l+2), (0, 1).
inline float reduce_lanes8(float* acc) {
  for (int l = 0; l < 4; ++l) acc[l] = acc[l] + acc[l + 4];
  for (int l = 0; l < 2; ++l) acc[l] = acc[l] + acc[l + 2];
  return acc[0] + acc[1];
}

/// Largest finite binary16 value; f16 scales are clamped to it so quantizers saturate.
inline constexpr float kF16Max = 65504.0f;

}  // namespace ds4::quant::ref
