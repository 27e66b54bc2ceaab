// Seeded random weight blocks generated in place, on the host or on a CUDA device (the same
// inline code is compiled by the C++ compiler and by nvcc), so a full-size model can be built
// directly in GPU memory (ds4-bench --synthetic) and its blocks checked on the CPU in tests.
//
// Every block is a pure function of (tensor seed, block index): no state, any order, any thread.
// Values are centred with a target standard deviation `stdev` per element (1/sqrt(fan-in) for
// matrices, as tools/make-model does), so activations stay O(1) through the network. The scale
// fields (f16 d, dmin) are computed once per tensor on the host (SynthParams) and are finite.
// Block layouts are those of src/quant/blocks.h (spec §5).
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace ds4::synth {

/// Per-tensor generator parameters (host-computed by synth_params in synthetic_model.h).
struct SynthParams {
  uint32_t type = 0;        ///< ggml type id: F32 0, F16 1, Q8_0 8, Q2_K 10, Q4_K 12, IQ2_XXS 16, BF16 30
  uint64_t seed = 0;        ///< tensor seed (model seed mixed with the tensor name)
  float amp = 0;            ///< F32/F16/BF16: values are amp * U[-1, 1)
  uint16_t d = 0, dmin = 0; ///< quantized types: f16 bits of the block scale(s), finite
  uint32_t block_bytes = 0; ///< bytes per block (F32 4, F16/BF16 2: one element per "block")
};

/// splitmix64 finaliser: a bijective 64-bit mix.
DS4_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// Random word k of block `b` of the tensor with seed `seed`.
DS4_HD uint64_t block_word(uint64_t seed, uint64_t b, uint32_t k) {
  return mix64(mix64(seed ^ (b * 0x9e3779b97f4a7c15ull)) + (uint64_t{k} + 1) * 0xd1b54a32d192ed03ull);
}

/// float32 -> IEEE binary16 bits, round to nearest even, for finite |f| < 65504 (the values
/// generated here); subnormals flush to signed zero (never produced for the amplitudes used).
DS4_HD uint16_t f16_bits_of(float f) {
  union { float f; uint32_t u; } c{f};
  const uint32_t x = c.u;
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax < 0x38800000u) return sign;
  uint32_t r = (ax >> 13) - (112u << 10);
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

/// float32 -> bfloat16 bits, round to nearest even (finite inputs).
DS4_HD uint16_t bf16_bits_of(float f) {
  union { float f; uint32_t u; } c{f};
  uint32_t x = c.u;
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

/// Uniform float in [-1, 1) from the top 24 bits of w.
DS4_HD float sym24(uint64_t w) { return static_cast<float>(static_cast<int32_t>(w >> 40) - (1 << 23)) * (1.0f / 8388608.0f); }

DS4_HD void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}

/// Q2_K / Q4_K sub-block scales are drawn from [kLo, kHi] (the min equals the scale, so every
/// sub-block is centred: value = d*sc*(q - mean code)).
inline constexpr int kQ2ScaleLo = 8, kQ2ScaleHi = 15, kQ4ScaleLo = 32, kQ4ScaleHi = 63;
/// IQ2_XXS 4-bit sub-block scales ls are drawn from [kIqLsLo, 15].
inline constexpr int kIqLsLo = 4;

/// Writes block `b` of a tensor described by `p` to out[0, p.block_bytes).
DS4_HD void synth_block(const SynthParams& p, uint64_t b, uint8_t* out) {
  switch (p.type) {
    case 0: {  // F32
      const float v = p.amp * sym24(block_word(p.seed, b, 0));
      union { float f; uint32_t u; } c{v};
      for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(c.u >> (8 * i));
      return;
    }
    case 1: put16(out, f16_bits_of(p.amp * sym24(block_word(p.seed, b, 0)))); return;
    case 30: put16(out, bf16_bits_of(p.amp * sym24(block_word(p.seed, b, 0)))); return;
    case 8: {  // Q8_0: d, 32 codes in [-127, 127]
      put16(out, p.d);
      for (uint32_t k = 0; k < 4; ++k) {
        const uint64_t w = block_word(p.seed, b, k);
        for (int j = 0; j < 8; ++j)
          out[2 + 8 * k + j] = static_cast<uint8_t>(static_cast<int8_t>(((w >> (8 * j)) & 0xff) % 255 - 127));
      }
      return;
    }
    case 10: {  // Q2_K: scales[16] = sc | sc << 4, qs[64] random 2-bit codes, d, dmin = 1.5 d
      const uint64_t ws = block_word(p.seed, b, 0);
      for (int j = 0; j < 16; ++j) {
        const int sc = kQ2ScaleLo + static_cast<int>((ws >> (4 * j)) & 7);
        out[j] = static_cast<uint8_t>(sc | (sc << 4));
      }
      for (uint32_t k = 0; k < 8; ++k) {
        const uint64_t w = block_word(p.seed, b, 1 + k);
        for (int j = 0; j < 8; ++j) out[16 + 8 * k + j] = static_cast<uint8_t>(w >> (8 * j));
      }
      put16(out + 80, p.d);
      put16(out + 82, p.dmin);
      return;
    }
    case 12: {  // Q4_K: d, dmin = 7.5 d, 8 six-bit (scale, min = scale) pairs packed, qs[128]
      put16(out, p.d);
      put16(out + 2, p.dmin);
      const uint64_t ws = block_word(p.seed, b, 0);
      uint8_t sc[8];
      for (int j = 0; j < 8; ++j) sc[j] = static_cast<uint8_t>(kQ4ScaleLo + ((ws >> (5 * j)) & 31));
      uint8_t* s = out + 4;
      for (int j = 0; j < 4; ++j) {
        s[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((sc[j + 4] & 15) << 4));
      }
      for (uint32_t k = 0; k < 16; ++k) {
        const uint64_t w = block_word(p.seed, b, 1 + k);
        for (int j = 0; j < 8; ++j) out[16 + 8 * k + j] = static_cast<uint8_t>(w >> (8 * j));
      }
      return;
    }
    case 16: {  // IQ2_XXS: d, then 8 groups of (4 grid bytes, 4 x 7-bit signs + 4-bit ls)
      put16(out, p.d);
      for (uint32_t k = 0; k < 8; ++k) {
        const uint64_t w = block_word(p.seed, b, 1 + k);
        const uint32_t grid = static_cast<uint32_t>(w);
        const uint64_t wl = block_word(p.seed, b, 9 + k / 4);  // 16 bits per group: uniform ls
        const uint32_t ls = kIqLsLo + static_cast<uint32_t>((((wl >> (16 * (k % 4))) & 0xffff) * (16 - kIqLsLo)) >> 16);
        const uint32_t signs = static_cast<uint32_t>(w >> 32) & 0x0fffffffu;
        const uint32_t a1 = signs | (ls << 28);
        uint8_t* q = out + 2 + 8 * k;
        for (int j = 0; j < 4; ++j) q[j] = static_cast<uint8_t>(grid >> (8 * j));
        for (int j = 0; j < 4; ++j) q[4 + j] = static_cast<uint8_t>(a1 >> (8 * j));
      }
      return;
    }
    default: return;  // synth_params rejects every other type on the host
  }
}

}  // namespace ds4::synth
