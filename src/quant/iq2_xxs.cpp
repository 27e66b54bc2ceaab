// Scalar reference for IQ2_XXS (spec §5.5): dequantize and dot with Q8_K activations (ds4
// `ds4_vec_dot_iq2_xxs_q8_K`).
#include <cstring>

#include "common/f16.h"
#include "quant/blocks.h"
#include "quant/iq2xxs_tables.h"
#include "quant/reference.h"

namespace ds4::quant::ref {

namespace {

// The two little-endian u32 words (a0: grid indices, a1: signs and ls) of sub-block k.
void sub_words(const BlockIq2Xxs& x, int k, uint32_t* a0, uint32_t* a1) {
  const uint16_t* q = x.qs + 4 * k;
  *a0 = static_cast<uint32_t>(q[0]) | (static_cast<uint32_t>(q[1]) << 16);
  *a1 = static_cast<uint32_t>(q[2]) | (static_cast<uint32_t>(q[3]) << 16);
}

int grid_byte(uint32_t index, int j) {
  return static_cast<int>((kIq2xxs.grid[index] >> (8 * j)) & 0xff);
}

}  // namespace

void dequant_iq2_xxs(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockIq2Xxs*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = f16_to_f32(blocks[b].d);
    for (int k = 0; k < 8; ++k) {
      uint32_t a0, a1;
      sub_words(blocks[b], k, &a0, &a1);
      const float db = d * (0.5f + static_cast<float>(a1 >> 28)) * 0.25f;
      for (int g = 0; g < 4; ++g) {
        const uint32_t index = (a0 >> (8 * g)) & 0xff;
        const uint8_t signs = kIq2xxs.signs[(a1 >> (7 * g)) & 127];
        for (int j = 0; j < 8; ++j) {
          const float v = db * static_cast<float>(grid_byte(index, j));
          dst[b * kQK_K + 32 * k + 8 * g + j] = (signs >> j) & 1 ? -v : v;
        }
      }
    }
  }
}

float dot_iq2_xxs(const void* w, const void* act, int64_t n) {
  const auto* wb = static_cast<const BlockIq2Xxs*>(w);
  const auto* yb = static_cast<const BlockQ8_K*>(act);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const int8_t* q8 = yb[b].qs;
    int32_t bsum = 0;
    for (int k = 0; k < 8; ++k) {
      uint32_t a0, a1;
      sub_words(wb[b], k, &a0, &a1);
      int32_t sumi = 0;
      for (int g = 0; g < 4; ++g) {
        const uint32_t index = (a0 >> (8 * g)) & 0xff;
        const uint8_t signs = kIq2xxs.signs[(a1 >> (7 * g)) & 127];
        for (int j = 0; j < 8; ++j) {
          const int v = grid_byte(index, j) * q8[32 * k + 8 * g + j];
          sumi += (signs >> j) & 1 ? -v : v;
        }
      }
      bsum += sumi * static_cast<int32_t>(2 * (a1 >> 28) + 1);
    }
    const float d = f16_to_f32(wb[b].d) * yb[b].d;
    sum = sum + d * static_cast<float>(bsum);
  }
  return 0.125f * sum;
}

}  // namespace ds4::quant::ref
