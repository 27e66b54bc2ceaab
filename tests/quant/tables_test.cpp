// The IQ2_XXS and MXFP4 format constants: checked against values copied by hand from ggml's
// ggml-common.h (spot entries) and against the rules that define them.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <set>

#include "quant/iq2xxs_tables.h"
#include "quant/mxfp4_tables.h"

namespace ds4::quant {
namespace {

TEST(Iq2xxsGrid, EntriesAreDistinctSortedAndUseOnlyTheThreeMagnitudes) {
  std::set<uint64_t> seen;
  for (int g = 0; g < 256; ++g) {
    seen.insert(kIq2xxs.grid[g]);
    if (g > 0) {
      EXPECT_LT(kIq2xxs.grid[g - 1], kIq2xxs.grid[g]) << g;
    }
    for (int j = 0; j < 8; ++j) {
      const auto b = (kIq2xxs.grid[g] >> (8 * j)) & 0xff;
      EXPECT_TRUE(b == 0x08 || b == 0x19 || b == 0x2b) << "entry " << g << " byte " << j;
    }
  }
  EXPECT_EQ(seen.size(), 256u);
}

TEST(Iq2xxsGrid, SpotEntriesMatchGgml) {
  // Copied from ggml-common.h `iq2xxs_grid` (4 entries per line there).
  EXPECT_EQ(kIq2xxs.grid[0], 0x0808080808080808u);
  EXPECT_EQ(kIq2xxs.grid[1], 0x080808080808082bu);
  EXPECT_EQ(kIq2xxs.grid[2], 0x0808080808081919u);
  EXPECT_EQ(kIq2xxs.grid[77], 0x08190808192b0808u);
  EXPECT_EQ(kIq2xxs.grid[128], 0x082b2b0808082b08u);
  EXPECT_EQ(kIq2xxs.grid[199], 0x192b0808192b2b08u);
  EXPECT_EQ(kIq2xxs.grid[252], 0x2b2b082b08080808u);
  EXPECT_EQ(kIq2xxs.grid[255], 0x2b2b2b1908081908u);
}

TEST(Iq2xxsGrid, NormsAreSumsOfSquares) {
  EXPECT_EQ(kIq2xxs.norm2[0], 8 * 64);
  EXPECT_EQ(kIq2xxs.norm2[1], 7 * 64 + 43 * 43);
  EXPECT_EQ(kIq2xxs.norm2[2], 6 * 64 + 2 * 25 * 25);
}

TEST(Iq2xxsSigns, FollowTheParityRuleAndMatchGgml) {
  // First and last rows of ggml's `ksigns_iq2xs`.
  const int first[16] = {0, 129, 130, 3, 132, 5, 6, 135, 136, 9, 10, 139, 12, 141, 142, 15};
  const int last[16] = {240, 113, 114, 243, 116, 245, 246, 119,
                        120, 249, 250, 123, 252, 125, 126, 255};
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(kIq2xxs.signs[i], first[i]) << i;
    EXPECT_EQ(kIq2xxs.signs[112 + i], last[i]) << 112 + i;
  }
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(kIq2xxs.signs[i] & 127, i);
    EXPECT_EQ(std::popcount(static_cast<unsigned>(kIq2xxs.signs[i])) % 2, 0) << i;
    for (int j = 0; j < 8; ++j) {
      const uint64_t byte = (kIq2xxs.sign_bytes[i] >> (8 * j)) & 0xff;
      EXPECT_EQ(byte, (kIq2xxs.signs[i] >> j) & 1 ? 0xffu : 0x00u) << i << " " << j;
    }
  }
}

TEST(Mxfp4Tables, DoubledE2M1Values) {
  const int expected[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  for (int c = 0; c < 16; ++c) EXPECT_EQ(kMxfp4.doubled[c], expected[c]) << c;
}

TEST(Mxfp4Tables, HalfScaleIsTwoToTheEMinus128) {
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(kMxfp4.half_scale[e], std::ldexp(1.0f, e - 128)) << e;
  }
  EXPECT_EQ(kMxfp4.half_scale[127], 0.5f);  // E8M0 127 = 1.0, halved
  EXPECT_EQ(std::bit_cast<uint32_t>(kMxfp4.half_scale[0]), 0x00200000u);  // 2^-128, subnormal
  EXPECT_EQ(std::bit_cast<uint32_t>(kMxfp4.half_scale[1]), 0x00400000u);
}

}  // namespace
}  // namespace ds4::quant
