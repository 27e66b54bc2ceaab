// Activation quantizers: Q8_0-style blocks (spec §3.1) and Q8_K (spec §5.6), hand-computed
// cases and edge cases, on every ISA this machine runs.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "quant/quant.h"
#include "quant_test_util.h"

namespace ds4::quant {
namespace {

using testing::runnable_isas;

class ActQuant : public testing::IsaRestore {};

TEST_F(ActQuant, Q8_0KeepsF32ScaleAndRoundsHalfToEven) {
  // amax = 63.5 -> d = 0.5 exactly, 1/d = 2: x * 2 = 2.5 -> 2, 3.5 -> 4, -0.5 -> -0 -> 0,
  // -63.5 -> -127, 0.3 * 2 = 0.6 -> 1.
  std::vector<float> x(32, 0.0f);
  x[0] = 1.25f;
  x[1] = 1.75f;
  x[2] = -0.25f;
  x[3] = -63.5f;
  x[4] = 0.3f;
  for (Isa isa : runnable_isas()) {
    set_isa(isa);
    SCOPED_TRACE(isa_name(isa));
    BlockQ8_0Act b;
    quantize_row_q8_0(x.data(), &b, 32);
    EXPECT_EQ(b.d, 0.5f);
    EXPECT_EQ(b.qs[0], 2);
    EXPECT_EQ(b.qs[1], 4);
    EXPECT_EQ(b.qs[2], 0);
    EXPECT_EQ(b.qs[3], -127);
    EXPECT_EQ(b.qs[4], 1);
    EXPECT_EQ(b.qs[5], 0);
  }
}

TEST_F(ActQuant, Q8_0ScaleIsNotRoundedToF16) {
  std::vector<float> x(32, 0.0f);
  x[7] = 1.0f;  // d = 1/127, not representable in f16 exactly
  for (Isa isa : runnable_isas()) {
    set_isa(isa);
    BlockQ8_0Act b;
    quantize_row_q8_0(x.data(), &b, 32);
    EXPECT_EQ(b.d, 1.0f / 127.0f) << isa_name(isa);
    EXPECT_EQ(b.qs[7], 127) << isa_name(isa);
  }
}

TEST_F(ActQuant, Q8_0ZeroAndTinyBlocksAreZero) {
  std::vector<float> x(64, 0.0f);
  for (int i = 32; i < 64; ++i) x[i] = 1e-38f * static_cast<float>(i - 40);  // 1/d overflows
  for (Isa isa : runnable_isas()) {
    set_isa(isa);
    BlockQ8_0Act b[2];
    quantize_row_q8_0(x.data(), b, 64);
    for (const auto& blk : b) {
      EXPECT_EQ(blk.d, 0.0f) << isa_name(isa);
      for (int8_t q : blk.qs) EXPECT_EQ(q, 0) << isa_name(isa);
    }
  }
}

TEST_F(ActQuant, Q8_0RoundTripWithinHalfStep) {
  const auto x = testing::gaussian(4096, 17, 4.0f);
  for (Isa isa : runnable_isas()) {
    set_isa(isa);
    std::vector<BlockQ8_0Act> b(128);
    quantize_row_q8_0(x.data(), b.data(), 4096);
    for (int i = 0; i < 4096; ++i) {
      const BlockQ8_0Act& blk = b[i / 32];
      EXPECT_GE(blk.qs[i % 32], -127);
      // |x - d q| <= d/2 up to the rounding of x * (1/d) (a few ulps of 127).
      EXPECT_LE(std::fabs(x[i] - static_cast<double>(blk.d) * blk.qs[i % 32]),
                blk.d * (0.5 + 1e-5)) << i;
    }
  }
}

TEST_F(ActQuant, Q8_KAllZeroBlockHasZeroScaleAndSums) {
  std::vector<float> x(512, 0.0f);
  for (int i = 256; i < 512; ++i) x[i] = -0.0f;  // negative zeros are zeros too
  for (Isa isa : runnable_isas()) {
    set_isa(isa);
    BlockQ8_K b[2];
    quantize_row_q8_K(x.data(), b, 512);
    for (const auto& blk : b) {
      EXPECT_EQ(blk.d, 0.0f);
      for (int8_t q : blk.qs) EXPECT_EQ(q, 0);
      for (int16_t s : blk.bsums) EXPECT_EQ(s, 0);
    }
  }
}

TEST_F(ActQuant, Q8_KSignedMaxRuleAndBsums) {
  // max = -2 (largest magnitude) -> iscale = -127 / -2 = 63.5, d = 1/63.5:
  // q[3] = -127, q[20] = round(63.5) = 64 (half to even), q[255] = round(31.75) = 32.
  std::vector<float> x(256, 0.0f);
  x[3] = -2.0f;
  x[20] = 1.0f;
  x[255] = 0.5f;
  for (Isa isa : runnable_isas()) {
    set_isa(isa);
    SCOPED_TRACE(isa_name(isa));
    BlockQ8_K b;
    quantize_row_q8_K(x.data(), &b, 256);
    EXPECT_EQ(b.d, 1.0f / 63.5f);
    EXPECT_EQ(b.qs[3], -127);
    EXPECT_EQ(b.qs[20], 64);
    EXPECT_EQ(b.qs[255], 32);
    EXPECT_EQ(b.bsums[0], -127);
    EXPECT_EQ(b.bsums[1], 64);
    EXPECT_EQ(b.bsums[15], 32);
    for (int g = 2; g < 15; ++g) EXPECT_EQ(b.bsums[g], 0);
  }
}

TEST_F(ActQuant, Q8_KFirstOfTiedMaximaWinsAndGivesNegativeScale) {
  // +2 comes first: iscale = -127/2 = -63.5, d = -1/63.5; the +2 maps to -127, the -2 to +127.
  std::vector<float> x(256, 0.0f);
  x[5] = 2.0f;
  x[9] = -2.0f;
  x[10] = 1.0f;
  for (Isa isa : runnable_isas()) {
    set_isa(isa);
    SCOPED_TRACE(isa_name(isa));
    BlockQ8_K b;
    quantize_row_q8_K(x.data(), &b, 256);
    EXPECT_EQ(b.d, -1.0f / 63.5f);
    EXPECT_EQ(b.qs[5], -127);
    EXPECT_EQ(b.qs[9], 127);
    EXPECT_EQ(b.qs[10], -64);  // -63.5 rounds half to even
    EXPECT_EQ(b.bsums[0], -64);
  }
}

TEST_F(ActQuant, Q8_KRoundsHalfToEvenWithUnitScale) {
  // max = -127 -> iscale = 1 exactly, so q = round_half_even(x).
  std::vector<float> x(256, 0.0f);
  x[0] = -127.0f;
  x[1] = 2.5f;
  x[2] = 3.5f;
  x[3] = -0.5f;
  x[4] = -2.5f;
  x[5] = 100.4f;
  for (Isa isa : runnable_isas()) {
    set_isa(isa);
    BlockQ8_K b;
    quantize_row_q8_K(x.data(), &b, 256);
    EXPECT_EQ(b.d, 1.0f);
    EXPECT_EQ(b.qs[1], 2);
    EXPECT_EQ(b.qs[2], 4);
    EXPECT_EQ(b.qs[3], 0);
    EXPECT_EQ(b.qs[4], -2);
    EXPECT_EQ(b.qs[5], 100);
    EXPECT_EQ(b.bsums[0], -127 + 2 + 4 + 0 - 2 + 100);
  }
}

TEST_F(ActQuant, Q8_KTinyBlockIsZeroAndRandomBsumsMatchCodes) {
  auto x = testing::gaussian(1024, 23, 2.0f);
  for (int i = 256; i < 512; ++i) x[i] = 1e-38f * static_cast<float>(i % 5);  // iscale overflows
  for (Isa isa : runnable_isas()) {
    set_isa(isa);
    SCOPED_TRACE(isa_name(isa));
    BlockQ8_K b[4];
    quantize_row_q8_K(x.data(), b, 1024);
    EXPECT_EQ(b[1].d, 0.0f);
    for (int8_t q : b[1].qs) EXPECT_EQ(q, 0);
    for (int blk : {0, 2, 3}) {
      for (int g = 0; g < 16; ++g) {
        int sum = 0;
        for (int j = 0; j < 16; ++j) sum += b[blk].qs[16 * g + j];
        EXPECT_EQ(b[blk].bsums[g], sum);
      }
      for (int j = 0; j < 256; ++j) {
        EXPECT_GE(b[blk].qs[j], -127);
        const double err = std::fabs(x[256 * blk + j] - static_cast<double>(b[blk].d) * b[blk].qs[j]);
        EXPECT_LE(err, std::fabs(b[blk].d) * (0.5 + 1e-5));
      }
    }
  }
}

TEST_F(ActQuant, LengthsMustBeWholeBlocks) {
  std::vector<float> x(300, 1.0f);
  BlockQ8_0Act a[10];
  BlockQ8_K k[2];
  EXPECT_THROW(quantize_row_q8_0(x.data(), a, 33), Error);
  EXPECT_THROW(quantize_row_q8_K(x.data(), k, 300), Error);
  EXPECT_THROW(quantize_row_q8_K(x.data(), k, -256), Error);
}

}  // namespace
}  // namespace ds4::quant
