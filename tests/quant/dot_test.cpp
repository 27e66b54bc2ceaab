// Dot products against a float64 reference computed from the dequantized weight and activation
// values, with a rounding-error bound derived from each format's summation order (quant.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "quant/quant.h"
#include "quant_test_util.h"

namespace ds4::quant {
namespace {

constexpr double kU = 1.0 / (1 << 24);  // unit roundoff of f32

// Dequantized activation values (exact in double).
std::vector<double> act_values(ActType type, const void* act, int64_t n) {
  std::vector<double> x(static_cast<size_t>(n));
  if (type == ActType::F32) {
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<const float*>(act)[i];
  } else if (type == ActType::Q8_0) {
    const auto* b = static_cast<const BlockQ8_0Act*>(act);
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<double>(b[i / 32].d) * b[i / 32].qs[i % 32];
  } else {
    const auto* b = static_cast<const BlockQ8_K*>(act);
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<double>(b[i / 256].d) * b[i / 256].qs[i % 256];
  }
  return x;
}

// Per-element "min" part -(dmin * mn) of a Q2_K/Q4_K row (dequantize with d = 0), else 0: the
// kernels compute the scale and min parts separately, so both magnitudes enter the bound.
std::vector<double> min_parts(GgmlType type, std::vector<uint8_t> row, int64_t n) {
  std::vector<double> m(static_cast<size_t>(n), 0.0);
  if (type != GgmlType::Q2_K && type != GgmlType::Q4_K) return m;
  const size_t bb = ggml_type_info(static_cast<uint32_t>(type))->block_bytes;
  for (size_t off = 0; off < row.size(); off += bb) {
    uint16_t* d = type == GgmlType::Q2_K ? &reinterpret_cast<BlockQ2_K*>(row.data() + off)->d
                                          : &reinterpret_cast<BlockQ4_K*>(row.data() + off)->d;
    *d = 0;
  }
  const auto y = testing::dequantize(type, row.data(), n);
  for (int64_t i = 0; i < n; ++i) m[i] = y[i];
  return m;
}

// Sequential f32 additions per accumulator in the format's order (see quant.h vec_dot).
double sequential_adds(GgmlType type, int64_t n) {
  switch (type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: return std::ceil(n / 16.0) + 4;
    case GgmlType::Q8_0: case GgmlType::MXFP4: return std::ceil(n / 256.0) + 3;
    default: return static_cast<double>(n / 256);
  }
}

void check_dot(GgmlType type, const std::vector<float>& wf, const std::vector<float>& xf) {
  const auto n = static_cast<int64_t>(wf.size());
  const auto w = testing::quantize(type, wf);
  const ActType at = activation_type(type);
  const auto act = testing::quantize_act(at, xf);
  const auto wd = testing::dequantize(type, w.data(), n);
  const auto xd = act_values(at, act.data(), n);
  const auto mins = min_parts(type, w, n);
  double ref = 0.0, magnitude = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    ref += static_cast<double>(wd[i]) * xd[i];
    magnitude += (std::fabs(wd[i] - mins[i]) + std::fabs(mins[i])) * std::fabs(xd[i]);
  }
  // Each term is rounded at most ~4 times before it enters its accumulator (products, the
  // block scale, the int -> f32 conversion), then it sees the accumulator's additions.
  const double bound = (sequential_adds(type, n) + 6) * kU * magnitude;
  for (Isa isa : testing::runnable_isas()) {
    set_isa(isa);
    const double got = vec_dot(type, w.data(), act.data(), n);
    EXPECT_NEAR(got, ref, bound) << ggml_type_name(type) << " n=" << n << " " << isa_name(isa);
  }
}

class DotProduct : public testing::IsaRestore {};

TEST_F(DotProduct, MatchesFloat64ReferenceWithinRoundingBound) {
  for (GgmlType type : testing::weight_types()) {
    for (int64_t n : {256, 4096}) {
      const auto w = testing::gaussian(n, 40 + static_cast<uint32_t>(n), 0.05f);
      auto x = testing::gaussian(n, 90 + static_cast<uint32_t>(n), 3.0f);
      x[5] = 40.0f;  // an activation outlier
      check_dot(type, w, x);
    }
  }
}

TEST_F(DotProduct, HandlesOddLengthsForFloatRows) {
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    for (int64_t n : {1, 15, 17, 1001}) {
      check_dot(type, testing::gaussian(n, 3, 2.0f), testing::gaussian(n, 4, 0.5f));
    }
  }
}

TEST_F(DotProduct, EmptyRowIsZero) {
  for (GgmlType type : testing::weight_types()) {
    EXPECT_EQ(vec_dot(type, nullptr, nullptr, 0), 0.0f) << ggml_type_name(type);
  }
}

TEST_F(DotProduct, HandComputedQ8_0) {
  // Weights d = 0.5, q = 2 everywhere; activation d = 0.25, q = 4 everywhere: each block
  // gives (0.5 * 0.25) * (32 * 8) = 32; two blocks -> 64.
  BlockQ8_0 w[2];
  BlockQ8_0Act x[2];
  for (int b = 0; b < 2; ++b) {
    w[b].d = 0x3800;
    x[b].d = 0.25f;
    for (int i = 0; i < 32; ++i) {
      w[b].qs[i] = 2;
      x[b].qs[i] = 4;
    }
  }
  for (Isa isa : testing::runnable_isas()) {
    set_isa(isa);
    EXPECT_EQ(vec_dot(GgmlType::Q8_0, w, x, 64), 64.0f) << isa_name(isa);
  }
}

TEST_F(DotProduct, HandComputedQ2_K) {
  // d = 1, dmin = 0.5; every sub-block sc = 2, mn = 4; all codes 1 -> weight 1*2*1 - 0.5*4 = 0.
  // Activation d = 0.5, q = 3: isum = 256 * 2 * 1 * 3 = 1536, summs = 16 * 4 * 48 = 3072,
  // dot = 0.5*1536 - 0.25*3072 = 0.
  // Then code 3 in element 0 only: weight 0 -> 1*2*3 - 2 = 4, dot = 4 * 1.5 = 6.
  BlockQ2_K w{};
  w.d = 0x3c00;
  w.dmin = 0x3800;
  for (auto& s : w.scales) s = 2 | (4 << 4);
  for (auto& q : w.qs) q = 0x55;  // code 1 at every shift
  BlockQ8_K x{};
  x.d = 0.5f;
  for (auto& q : x.qs) q = 3;
  for (auto& s : x.bsums) s = 48;
  for (Isa isa : testing::runnable_isas()) {
    set_isa(isa);
    EXPECT_EQ(vec_dot(GgmlType::Q2_K, &w, &x, 256), 0.0f) << isa_name(isa);
  }
  w.qs[0] = 0x57;  // element 0 (shift 0) code 3
  for (Isa isa : testing::runnable_isas()) {
    set_isa(isa);
    EXPECT_EQ(vec_dot(GgmlType::Q2_K, &w, &x, 256), 6.0f) << isa_name(isa);
  }
}

}  // namespace
}  // namespace ds4::quant
