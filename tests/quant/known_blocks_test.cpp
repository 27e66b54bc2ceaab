// Hand-built blocks of every format decode to values computed by hand (spec §5), on every ISA
// this machine runs (several dequantizers have SIMD versions).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "quant/quant.h"
#include "quant_test_util.h"

namespace ds4::quant {
namespace {

using testing::IsaRestore;
using testing::runnable_isas;

class KnownBlocks : public IsaRestore {};

TEST_F(KnownBlocks, F16AndBf16) {
  const uint16_t h[5] = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x8000};
  const uint16_t b[3] = {0x3f80, 0xc040, 0x0001};
  for (Isa isa : runnable_isas()) {
    set_isa(isa);
    SCOPED_TRACE(isa_name(isa));
    float y[5];
    dequantize_row(GgmlType::F16, h, y, 5);
    EXPECT_EQ(y[0], 1.0f);
    EXPECT_EQ(y[1], -2.0f);
    EXPECT_EQ(y[2], 5.9604644775390625e-08f);  // 2^-24, the smallest f16 subnormal
    EXPECT_EQ(y[3], 65504.0f);
    EXPECT_TRUE(std::signbit(y[4]) && y[4] == 0.0f);
    dequantize_row(GgmlType::BF16, b, y, 3);
    EXPECT_EQ(y[0], 1.0f);
    EXPECT_EQ(y[1], -3.0f);
    EXPECT_EQ(y[2], std::ldexp(1.0f, -133));  // bf16 0x0001 = f32 subnormal 2^-133
  }
}

TEST_F(KnownBlocks, Q8_0) {
  BlockQ8_0 blk{};
  blk.d = 0x3800;  // 0.5
  for (int i = 0; i < 32; ++i) blk.qs[i] = static_cast<int8_t>(8 * i - 128);  // -128 .. 120
  for (Isa isa : runnable_isas()) {
    set_isa(isa);
    SCOPED_TRACE(isa_name(isa));
    float y[32];
    dequantize_row(GgmlType::Q8_0, &blk, y, 32);
    EXPECT_EQ(y[0], -64.0f);
    EXPECT_EQ(y[1], -60.0f);
    EXPECT_EQ(y[16], 0.0f);
    EXPECT_EQ(y[31], 60.0f);
  }
}

TEST_F(KnownBlocks, Q2_K) {
  BlockQ2_K blk{};
  blk.d = 0x3800;     // 0.5
  blk.dmin = 0x4000;  // 2.0
  for (int j = 0; j < 16; ++j) blk.scales[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  blk.qs[0] = 0xE4;        // 0b11'10'01'00: codes 0,1,2,3 for elements 0, 32, 64, 96
  blk.qs[32 + 17] = 0x03;  // element 128 + 17 = 145: code 3
  blk.qs[63] = 0x80;       // element 128 + 96 + 31 = 255: code 2 (bits 6-7)
  for (Isa isa : runnable_isas()) {
    set_isa(isa);
    SCOPED_TRACE(isa_name(isa));
    float y[256];
    dequantize_row(GgmlType::Q2_K, &blk, y, 256);
    EXPECT_EQ(y[0], -30.0f);   // sub-block 0: sc 0, mn 15 -> 0.5*0*0 - 2*15
    EXPECT_EQ(y[17], -28.0f);  // sub-block 1: sc 1, mn 14, code 0 -> -28
    EXPECT_EQ(y[32], -25.0f);  // sub-block 2: sc 2, mn 13 -> 0.5*2*1 - 26
    EXPECT_EQ(y[64], -18.0f);  // sub-block 4: sc 4, mn 11 -> 0.5*4*2 - 22
    EXPECT_EQ(y[96], -9.0f);   // sub-block 6: sc 6, mn 9 -> 0.5*6*3 - 18
    EXPECT_EQ(y[145], 1.5f);   // sub-block 9: sc 9, mn 6 -> 0.5*9*3 - 12
    EXPECT_EQ(y[255], 15.0f);  // sub-block 15: sc 15, mn 0 -> 0.5*15*2
  }
}

TEST_F(KnownBlocks, Q4_K_ScalePacking) {
  // Sub-block scales sc = {1, 2, 3, 63, 17, 33, 48, 5} and mins mn = {0, 1, 62, 4, 40, 16, 3, 63}
  // packed by hand per spec §5.4:
  //   bytes 0-3:  sc[j] | (sc[j+4] >> 4) << 6  -> 1|1<<6, 2|2<<6, 3|3<<6, 63|0<<6
  //   bytes 4-7:  mn[j] | (mn[j+4] >> 4) << 6  -> 0|2<<6, 1|1<<6, 62|0<<6, 4|3<<6
  //   bytes 8-11: (sc[j+4] & 15) | (mn[j+4] & 15) << 4 -> 1|8<<4, 1|0<<4, 0|3<<4, 5|15<<4
  BlockQ4_K blk{};
  const uint8_t scales[12] = {0x41, 0x82, 0xC3, 0x3F, 0x80, 0x41, 0x3E, 0xC4, 0x81, 0x01, 0x30, 0xF5};
  std::memcpy(blk.scales, scales, 12);
  blk.d = 0x3c00;     // 1.0
  blk.dmin = 0x3400;  // 0.25
  blk.qs[0] = 0x3A;    // element 0 (c 0, low nibble) code 10; element 32 (high nibble) code 3
  blk.qs[69] = 0xF0;   // element 128 + 32 + 5 = 165 (c 2, high nibble): code 15
  blk.qs[103] = 0x07;  // element 192 + 7 = 199 (c 3, low nibble): code 7
  blk.qs[127] = 0x90;  // element 255 (c 3, high nibble): code 9
  for (Isa isa : runnable_isas()) {
    set_isa(isa);
    SCOPED_TRACE(isa_name(isa));
    float y[256];
    dequantize_row(GgmlType::Q4_K, &blk, y, 256);
    EXPECT_EQ(y[0], 10.0f);     // sub-block 0: 1*1*10 - 0.25*0
    EXPECT_EQ(y[32], 5.75f);    // sub-block 1: 1*2*3 - 0.25*1
    EXPECT_EQ(y[64], -15.5f);   // sub-block 2: code 0 - 0.25*62
    EXPECT_EQ(y[96], -1.0f);    // sub-block 3: code 0 - 0.25*4
    EXPECT_EQ(y[128], -10.0f);  // sub-block 4: code 0 - 0.25*40
    EXPECT_EQ(y[165], 491.0f);  // sub-block 5: 33*15 - 0.25*16
    EXPECT_EQ(y[199], 335.25f); // sub-block 6: 48*7 - 0.25*3
    EXPECT_EQ(y[255], 29.25f);  // sub-block 7: 5*9 - 0.25*63
  }
}

TEST_F(KnownBlocks, Iq2xxsGridSignsAndScale) {
  // Sub-block 0: grid indices {1, 0, 255, 2}, sign indices {1, 3, 0, 127}, ls = 5.
  //   a0 = 1 | 0 << 8 | 255 << 16 | 2 << 24 = 0x02FF0001
  //   a1 = 1 | 3 << 7 | 0 << 14 | 127 << 21 | 5 << 28 = 0x5FE00181
  // Sign masks: ksigns[1] = 0x81 (elements 0, 7), ksigns[3] = 0x03 (0, 1), ksigns[0] = 0,
  // ksigns[127] = 0xFF (all). Scale d * (0.5 + 5) * 0.25 = 1.375 with d = 1.
  // Grid 1 = 0x080808080808082b -> {43, 8, 8, 8, 8, 8, 8, 8}; grid 0 -> all 8;
  // grid 255 = 0x2b2b2b1908081908 -> {8, 25, 8, 8, 25, 43, 43, 43}; grid 2 -> {25, 25, 8 ...}.
  BlockIq2Xxs blk{};
  blk.d = 0x3c00;
  blk.qs[0] = 0x0001;
  blk.qs[1] = 0x02FF;
  blk.qs[2] = 0x0181;
  blk.qs[3] = 0x5FE0;
  const float expected[32] = {
      -59.125f, 11, 11, 11, 11, 11, 11, -11,                      // -43, 8 .. 8, -8
      -11, -11, 11, 11, 11, 11, 11, 11,                           // -8, -8, 8 ..
      11, 34.375f, 11, 11, 34.375f, 59.125f, 59.125f, 59.125f,    // grid 255
      -34.375f, -34.375f, -11, -11, -11, -11, -11, -11};          // -(grid 2)
  for (Isa isa : runnable_isas()) {
    set_isa(isa);
    SCOPED_TRACE(isa_name(isa));
    float y[256];
    dequantize_row(GgmlType::IQ2_XXS, &blk, y, 256);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], expected[i]) << i;
    // Other sub-blocks are all-zero words: grid 0, no signs, ls 0 -> 1 * 0.5 * 0.25 * 8 = 1.
    for (int i = 32; i < 256; ++i) EXPECT_EQ(y[i], 1.0f) << i;
  }
}

TEST_F(KnownBlocks, Mxfp4ElementOrderAndScale) {
  BlockMxfp4 blk[2]{};
  blk[0].e = 130;      // half scale 2^(130-128) = 4
  blk[0].qs[0] = 0x9F; // element 0: code 15 (-12); element 16: code 9 (-1)
  blk[0].qs[5] = 0x27; // element 5: code 7 (12); element 21: code 2 (2)
  blk[1].e = 0;        // half scale 2^-128
  blk[1].qs[3] = 0x01; // element 3: code 1 -> 1 * 2^-128
  for (Isa isa : runnable_isas()) {
    set_isa(isa);
    SCOPED_TRACE(isa_name(isa));
    float y[64];
    dequantize_row(GgmlType::MXFP4, blk, y, 64);
    EXPECT_EQ(y[0], -48.0f);
    EXPECT_EQ(y[16], -4.0f);
    EXPECT_EQ(y[5], 48.0f);
    EXPECT_EQ(y[21], 8.0f);
    EXPECT_EQ(y[1], 0.0f);
    EXPECT_EQ(y[32 + 3], std::ldexp(1.0f, -128));
    EXPECT_EQ(y[32 + 4], 0.0f);
  }
}

TEST_F(KnownBlocks, Q8_K) {
  BlockQ8_K blk{};
  blk.d = 0.25f;
  for (int i = 0; i < 256; ++i) blk.qs[i] = static_cast<int8_t>(i - 128);
  float y[256];
  dequantize_row(GgmlType::Q8_K, &blk, y, 256);
  EXPECT_EQ(y[0], -32.0f);
  EXPECT_EQ(y[129], 0.25f);
  EXPECT_EQ(y[255], 31.75f);
}

}  // namespace
}  // namespace ds4::quant
