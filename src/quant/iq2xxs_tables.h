// IQ2_XXS lookup tables (spec §5.5). Plain data (no inline functions) so every ISA-specific
// translation unit can use them.
#pragma once

#include <cstdint>

namespace ds4::quant {

struct Iq2xxsTables {
  /// The 256 grid points. Byte j (little-endian: j = 0 is the least significant byte) of entry
  /// g is the magnitude of element j of a group of 8; every byte is 0x08, 0x19 or 0x2b
  /// (8, 25, 43). Format constant, identical to ggml's `iq2xxs_grid` (ggml-common.h).
  uint64_t grid[256];
  /// The 128 sign patterns: signs[i] is an 8-bit mask (bit j set = negate element j).
  /// Rule: signs[i] = i | 0x80 when popcount(i) is odd, else i, so every mask has an even
  /// number of set bits (ggml's `ksigns_iq2xs`).
  uint8_t signs[128];
  /// signs expanded to bytes: byte j of sign_bytes[i] is 0xff when bit j of signs[i] is set,
  /// else 0x00 (lets SIMD kernels negate lanes).
  uint64_t sign_bytes[128];
  /// Squared norm of each grid point, sum over j of byte_j^2 (for the quantizer's search).
  int32_t norm2[256];
};

/// The tables, constant-initialized at compile time.
extern const Iq2xxsTables kIq2xxs;

}  // namespace ds4::quant
