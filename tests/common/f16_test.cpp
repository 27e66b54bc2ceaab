// f16/bf16 conversions: exhaustive round-trip of all 65536 half values, and f32->f16 rounding
// checked against the compiler's own _Float16 conversion on a dense sweep of float bit patterns.
#include "common/f16.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ds4 {
namespace {

TEST(F16, EveryHalfRoundTripsExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    EXPECT_EQ(f32_to_f16(f), h) << "half bits " << h;
    EXPECT_EQ(static_cast<float>(static_cast<_Float16>(f)), f);
  }
}

TEST(F16, NarrowingMatchesCompilerRoundToNearestEven) {
  // Step through float bit patterns (every 997th) covering normals, subnormals, overflow.
  for (uint64_t u = 0; u < 0x100000000ull; u += 997) {
    const float f = f32_from_bits(static_cast<uint32_t>(u));
    if (std::isnan(f)) continue;
    const _Float16 ref = static_cast<_Float16>(f);
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, 2);
    ASSERT_EQ(f32_to_f16(f), ref_bits) << "float bits " << u;
  }
}

TEST(F16, HandComputedValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                 // ties away to inf (even)
  EXPECT_EQ(f32_to_f16(5.9604644775390625e-08f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(2.98023223876953125e-08f), 0x0000); // half of it ties to even 0
  EXPECT_FLOAT_EQ(f16_to_f32(0x3555), 0.333251953125f);
}

TEST(BF16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(bf16_to_f32(0x4049), f32_from_bits(0x40490000u));
}

}  // namespace
}  // namespace ds4
