// Byte layouts of the block formats implemented by ds4::quant (spec §5). All fields are
// little-endian; `uint16_t d` fields hold IEEE binary16 bits. These are plain structs with no
// member functions so the ISA-specific translation units can include them safely.
#pragma once

#include <cstdint>

#include "common/ggml_type.h"

namespace ds4::quant {

inline constexpr int kQK8_0 = 32;   ///< elements per Q8_0 / Q8_0-activation block
inline constexpr int kQK_K = 256;   ///< elements per K-quant / IQ2_XXS / Q8_K super-block
inline constexpr int kQKMxfp4 = 32; ///< elements per MXFP4 block

/// Q8_0 weight block (type 8, spec §5.2): value[i] = f16(d) * qs[i].
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};

/// Q8_0-style *activation* block (spec §3.1; not a GGUF type): value[i] = d * qs[i] with an
/// f32 d = max|x|/127, as ds4's `quantize_q8_0_activation` keeps it (it is never rounded to f16).
/// Codes produced by the quantizer lie in [-127, 127].
struct BlockQ8_0Act {
  float d;
  int8_t qs[kQK8_0];
};

/// Q2_K block (type 10, spec §5.3): 16 sub-blocks of 16; scales[j] = sc | (mn << 4);
/// value = f16(d) * sc * q - f16(dmin) * mn with the 2-bit q at qs[32k + l] >> 2s for element
/// 128k + 32s + l.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};

/// Q4_K block (type 12, spec §5.4): 8 sub-blocks of 32 with 6-bit scale/min packed in
/// scales[12]; elements 64c + l use the low nibble of qs[32c + l], 64c + 32 + l the high one.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};

/// IQ2_XXS block (type 16, spec §5.5): f16 d, then 8 sub-blocks of 32 elements, each stored as
/// two little-endian u32 (a0 = four grid indices, a1 = four 7-bit sign indices | ls << 28).
struct BlockIq2Xxs {
  uint16_t d;
  uint16_t qs[kQK_K / 8];
};

/// MXFP4 block (type 39): E8M0 exponent byte e, then 16 bytes of E2M1 codes. Element j < 16 is
/// the low nibble of qs[j], element j + 16 the high nibble (llama.cpp's order);
/// value = kMxfp4Doubled[code] * 2^(e - 128) (the table holds twice the E2M1 values).
struct BlockMxfp4 {
  uint8_t e;
  uint8_t qs[kQKMxfp4 / 2];
};

/// Q8_K activation block (type 15, spec §5.6): value[i] = d * qs[i]; bsums[j] is the sum of
/// qs[16j .. 16j+15].
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

// The structs must match the geometry table shared with the GGUF reader.
static_assert(sizeof(BlockQ8_0) == ggml_type_info(8)->block_bytes);
static_assert(kQK8_0 == static_cast<int>(ggml_type_info(8)->block_elems));
static_assert(sizeof(BlockQ2_K) == ggml_type_info(10)->block_bytes);
static_assert(kQK_K == static_cast<int>(ggml_type_info(10)->block_elems));
static_assert(sizeof(BlockQ4_K) == ggml_type_info(12)->block_bytes);
static_assert(sizeof(BlockQ8_K) == ggml_type_info(15)->block_bytes);
static_assert(sizeof(BlockIq2Xxs) == ggml_type_info(16)->block_bytes);
static_assert(sizeof(BlockMxfp4) == ggml_type_info(39)->block_bytes);
static_assert(kQKMxfp4 == static_cast<int>(ggml_type_info(39)->block_elems));
static_assert(sizeof(BlockQ8_0Act) == 36);

/// Q4_K 6-bit scale and min of sub-block j of the 12 packed scale bytes `s` (spec §5.4).
/// `static inline`: the ISA-specific kernel files include this header too, and each must keep
/// its own copy (see avx2_util.h).
static inline void scale_min_k4(int j, const uint8_t* s, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

}  // namespace ds4::quant
