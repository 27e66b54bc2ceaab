// MXFP4 lookup tables (GGUF type 39). Plain data so every ISA-specific translation unit can use
// them.
#pragma once

#include <cstdint>

namespace ds4::quant {

struct Mxfp4Tables {
  /// Twice the E2M1 value of each 4-bit code: {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, ..., -12}
  /// (E2M1 = {0, .5, 1, 1.5, 2, 3, 4, 6} with bit 3 the sign; ggml's `kvalues_mxfp4`).
  int8_t doubled[16];
  /// half_scale[e] = 2^(e - 128) = E8M0(e) / 2, the factor that turns a doubled code into the
  /// element value. e = 0 and 1 give the f32 subnormals 2^-128 and 2^-127 (ggml's
  /// `GGML_E8M0_TO_FP32_HALF`); e = 255 gives 2^127 (no NaN encoding, as in ggml).
  float half_scale[256];
};

/// The tables, constant-initialized at compile time.
extern const Mxfp4Tables kMxfp4;

}  // namespace ds4::quant
