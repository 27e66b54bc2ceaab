// dequantize(quantize(x)) error bounds per format, on random and adversarial rows (zeros,
// constants, one huge outlier, subnormals, +-FLT_MAX).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "quant/quant.h"
#include "quant_test_util.h"

namespace ds4::quant {
namespace {

using testing::block_of;
using testing::dequantize;
using testing::gaussian;
using testing::quantize;

std::vector<float> round_trip(GgmlType type, const std::vector<float>& x) {
  const auto q = quantize(type, x);
  return dequantize(type, q.data(), static_cast<int64_t>(x.size()));
}

double rms_relative_error(const std::vector<float>& x, const std::vector<float>& y) {
  double se = 0.0, sx = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    se += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
    sx += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(se / sx);
}

// Bounds on the RMS error relative to the RMS of the data. Measured on these rows (2048
// Gaussian values, seed 11 / 2048 uniform values in [-1, 1], seed 3): F16 2.1e-4 / 1.8e-4,
// BF16 1.7e-3 / 1.4e-3, Q8_0 5.1e-3 / 3.8e-3, Q4_K 0.070 / 0.054, Q2_K 0.263 / 0.218,
// IQ2_XXS 0.321 / 0.325, MXFP4 0.113 / 0.098. The bounds leave ~15% headroom.
struct RmsBound {
  GgmlType type;
  double bound;
};
const RmsBound kRmsBounds[] = {
    {GgmlType::F16, 2.5e-4}, {GgmlType::BF16, 2.0e-3}, {GgmlType::Q8_0, 6.5e-3},
    {GgmlType::Q4_K, 0.081}, {GgmlType::Q2_K, 0.30},   {GgmlType::IQ2_XXS, 0.38},
    {GgmlType::MXFP4, 0.128},
};

TEST(RoundTrip, GaussianAndUniformRmsError) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> uniform(2048);
  for (auto& v : uniform) v = u(rng);
  const auto normal = gaussian(2048, 11);
  for (const auto& [type, bound] : kRmsBounds) {
    EXPECT_LE(rms_relative_error(normal, round_trip(type, normal)), bound) << ggml_type_name(type);
    EXPECT_LE(rms_relative_error(uniform, round_trip(type, uniform)), bound)
        << ggml_type_name(type);
  }
  const auto f32 = round_trip(GgmlType::F32, normal);
  EXPECT_EQ(std::memcmp(f32.data(), normal.data(), 4 * normal.size()), 0);
}

TEST(RoundTrip, PerElementBoundsThatHoldByConstruction) {
  // F16/BF16: round to nearest: |err| <= 2^-11 |x| (2^-8 for bf16) in the normal range.
  // Q8_0: |err| <= d/2 + 127 |d - f16(d)| <= (0.5 + 127 * 2^-11) * amax / 127 per block.
  // MXFP4: the chosen scale never has a gap wider than 4 * 2^(e-128) <= 2 amax / 3 below the
  //        largest representable value, so |err| <= amax / 3 per block.
  const auto x = gaussian(4096, 21, 3.0f);
  const auto h = round_trip(GgmlType::F16, x);
  const auto b = round_trip(GgmlType::BF16, x);
  const auto q8 = round_trip(GgmlType::Q8_0, x);
  const auto fp4 = round_trip(GgmlType::MXFP4, x);
  for (size_t blk = 0; blk < x.size() / 32; ++blk) {
    double amax = 0.0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(static_cast<double>(x[32 * blk + j])));
    for (int j = 0; j < 32; ++j) {
      const size_t i = 32 * blk + j;
      const double ax = std::fabs(static_cast<double>(x[i]));
      EXPECT_LE(std::fabs(h[i] - static_cast<double>(x[i])), std::ldexp(ax, -11)) << i;
      EXPECT_LE(std::fabs(b[i] - static_cast<double>(x[i])), std::ldexp(ax, -8)) << i;
      EXPECT_LE(std::fabs(q8[i] - static_cast<double>(x[i])), (0.5 + 127.0 / 2048) * amax / 127) << i;
      EXPECT_LE(std::fabs(fp4[i] - static_cast<double>(x[i])), amax / 3) << i;
    }
  }
}

TEST(RoundTrip, ZerosStayExactlyZero) {
  const std::vector<float> zeros(512, 0.0f);
  for (GgmlType type : testing::weight_types()) {
    for (float v : round_trip(type, zeros)) EXPECT_EQ(v, 0.0f) << ggml_type_name(type);
  }
}

TEST(RoundTrip, ConstantRowsKeepF16Precision) {
  // A constant row is representable exactly up to the f16 rounding of the scale(s).
  for (float c : {0.7f, -3.1f, 1234.5f}) {
    const std::vector<float> x(512, c);
    for (GgmlType type : {GgmlType::F16, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q4_K,
                          GgmlType::IQ2_XXS}) {
      for (float v : round_trip(type, x)) {
        EXPECT_NEAR(v, c, std::fabs(c) * 1e-3) << ggml_type_name(type) << " c=" << c;
      }
    }
  }
  // MXFP4: 0.75 = 12 * 2^-4 / 1 is a code value; 0.7 rounds to it (gap bound amax/3).
  for (float v : round_trip(GgmlType::MXFP4, std::vector<float>(64, 0.75f))) EXPECT_EQ(v, 0.75f);
  for (float v : round_trip(GgmlType::MXFP4, std::vector<float>(64, -0.7f))) EXPECT_EQ(v, -0.75f);
}

TEST(RoundTrip, OutlierOnlyAffectsItsOwnBlock) {
  const auto base = gaussian(2048, 5);
  auto spiked = base;
  const size_t at = 700;
  spiked[at] = 1000.0f;
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q4_K, GgmlType::IQ2_XXS,
                        GgmlType::MXFP4}) {
    const auto a = quantize(type, base);
    const auto b = quantize(type, spiked);
    const size_t block_bytes = ggml_type_info(static_cast<uint32_t>(type))->block_bytes;
    const size_t spiked_block = at / block_of(type);
    for (size_t blk = 0; blk < a.size() / block_bytes; ++blk) {
      if (blk == spiked_block) continue;
      EXPECT_EQ(std::memcmp(a.data() + blk * block_bytes, b.data() + blk * block_bytes, block_bytes), 0)
          << ggml_type_name(type) << " block " << blk;
    }
    const auto y = dequantize(type, b.data(), 2048);
    if (type == GgmlType::IQ2_XXS) {
      // IQ2_XXS has no zero level: with the outlier at 43*s its 31 neighbours would cost
      // >= (8s)^2 each, so the squared-error search shrinks the outlier instead. It keeps
      // its sign and at least the smallest-grid share of its size.
      EXPECT_GT(y[at], 1000.0 * 8 / 43) << ggml_type_name(type);
      EXPECT_LT(y[at], 1000.0 * 1.01) << ggml_type_name(type);
      continue;
    }
    // The outlier itself: within 1% for the scale-searching formats, 2.4% for MXFP4 (the
    // nearest code value is 8 * 2^7 = 1024).
    const double tol = type == GgmlType::MXFP4 ? 24.0 : 10.0;
    EXPECT_NEAR(y[at], 1000.0, tol) << ggml_type_name(type);
  }
}

TEST(RoundTrip, SubnormalInputsGiveTinyAbsoluteErrors) {
  auto x = gaussian(512, 8);
  for (auto& v : x) v *= 1e-40f;  // f32 subnormals
  for (GgmlType type : testing::weight_types()) {
    const auto y = round_trip(type, x);
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_LE(std::fabs(static_cast<double>(y[i]) - x[i]), 1e-39) << ggml_type_name(type);
    }
  }
}

TEST(RoundTrip, FloatMaxSaturatesQuantizedFormats) {
  auto x = gaussian(512, 9);
  x[0] = FLT_MAX;
  x[33] = -FLT_MAX;
  x[300] = FLT_MAX;
  EXPECT_EQ(round_trip(GgmlType::F32, x)[0], FLT_MAX);
  EXPECT_EQ(round_trip(GgmlType::F16, x)[33], -INFINITY);  // IEEE overflow
  EXPECT_EQ(round_trip(GgmlType::BF16, x)[0], INFINITY);
  // f16 scales clamp at 65504: Q8_0's largest value is 65504 * 127.
  const auto q8 = round_trip(GgmlType::Q8_0, x);
  EXPECT_EQ(q8[0], 65504.0f * 127.0f);
  EXPECT_EQ(q8[33], -65504.0f * 127.0f);
  // MXFP4: e = 253, the largest finite code value 6 * 2^125 = 1.5 * 2^127.
  const auto fp4 = round_trip(GgmlType::MXFP4, x);
  EXPECT_EQ(fp4[0], std::ldexp(1.5f, 127));
  EXPECT_EQ(fp4[33], -std::ldexp(1.5f, 127));
  for (GgmlType type : {GgmlType::Q2_K, GgmlType::Q4_K, GgmlType::IQ2_XXS}) {
    const auto y = round_trip(type, x);
    for (float v : y) EXPECT_TRUE(std::isfinite(v)) << ggml_type_name(type);
    EXPECT_GT(y[0], 1e6f) << ggml_type_name(type);
    EXPECT_GT(y[300], 1e6f) << ggml_type_name(type);
  }
  for (float v : q8) EXPECT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace ds4::quant
