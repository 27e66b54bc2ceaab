// FP8 E4M3FN / FP4 E2M1 round trips and the Hadamard-128 rotation (model-spec §3.4.4, §3.4.7):
// table endpoints, exact ties, dense sweeps against a table-search reference, block scaling
// against float64, amax = 0, huge amax, subnormals, non-finite input.
#include "model/kv_quant.h"

#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "model_test_util.h"

namespace ds4::model {
namespace {

using testing::random_vector;
using testing::random_wide_vector;

// E4M3FN table written from the spec: i in [0, 126].
double ref_e4m3(int i) {
  const int e = (i >> 3) & 15, m = i & 7;
  return e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
}
const double kE2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

// Nearest table value by linear scan; exact ties go to the even index; |v| clamped to the max.
double ref_round(double v, int n, double (*value)(int)) {
  const double a = std::min(std::fabs(v), value(n - 1));
  int best = 0;
  for (int i = 1; i < n; ++i) {
    const double db = std::fabs(a - value(best)), di = std::fabs(a - value(i));
    if (di < db || (di == db && i % 2 == 0)) best = i;
  }
  return v < 0 ? -value(best) : value(best);
}
double ref_fp8_value(double v) { return ref_round(v, 127, ref_e4m3); }
double ref_fp4_value(double v) {
  return ref_round(v, 8, [](int i) { return kE2m1[i]; });
}

// Block round trip in float64: scale = 2^ceil(log2(max(amax, floor) / qmax)).
std::vector<double> ref_round_trip(const std::vector<float>& x, size_t block, double floor_,
                                   double qmax, double (*q)(double)) {
  std::vector<double> out(x.size());
  for (size_t off = 0; off < x.size(); off += block) {
    double amax = 0;
    for (size_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(double(x[off + i])));
    amax = std::max(amax, floor_);
    const double scale = std::ldexp(1.0, int(std::ceil(std::log2(amax / qmax))));
    for (size_t i = 0; i < block; ++i) out[off + i] = q(x[off + i] / scale) * scale;
  }
  return out;
}

TEST(KvQuant, E4m3TableEndpoints) {
  EXPECT_EQ(e4m3fn_value(0), 0.0f);
  EXPECT_EQ(e4m3fn_value(1), 0.001953125f);        // 2^-9, smallest subnormal
  EXPECT_EQ(e4m3fn_value(7), 7 * 0.001953125f);    // largest subnormal
  EXPECT_EQ(e4m3fn_value(8), 0.015625f);           // 2^-6, smallest normal
  EXPECT_EQ(e4m3fn_value(56), 1.0f);
  EXPECT_EQ(e4m3fn_value(119), 240.0f);
  EXPECT_EQ(e4m3fn_value(120), 256.0f);
  EXPECT_EQ(e4m3fn_value(125), 416.0f);
  EXPECT_EQ(e4m3fn_value(126), 448.0f);
  for (int i = 0; i < 127; ++i) EXPECT_EQ(double(e4m3fn_value(i)), ref_e4m3(i)) << i;
  EXPECT_THROW(e4m3fn_value(127), Error);
  EXPECT_THROW(e4m3fn_value(-1), Error);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(double(e2m1_value(i)), kE2m1[i]);
  EXPECT_THROW(e2m1_value(8), Error);
}

TEST(KvQuant, E4m3TiesGoToTheEvenIndex) {
  // midpoint of 1 (index 56) and 1.125 (57) -> 1; of 1.125 and 1.25 (58) -> 1.25.
  EXPECT_EQ(e4m3fn_round(1.0625f), 1.0f);
  EXPECT_EQ(e4m3fn_round(1.1875f), 1.25f);
  // subnormal ties: 0.5 * 2^-9 -> 0 (index 0); 1.5 * 2^-9 -> 2 * 2^-9 (index 2).
  EXPECT_EQ(e4m3fn_round(0.0009765625f), 0.0f);
  EXPECT_EQ(e4m3fn_round(0.0029296875f), 0.00390625f);
  // across the subnormal/normal border: 7.5 * 2^-9 -> 2^-6 (index 8).
  EXPECT_EQ(e4m3fn_round(7.5f * 0.001953125f), 0.015625f);
  // across an exponent: midpoint of 240 (119) and 256 (120) -> 256.
  EXPECT_EQ(e4m3fn_round(248.0f), 256.0f);
  EXPECT_EQ(e4m3fn_round(-248.0f), -256.0f);
  // top: 432 = midpoint of 416 (125) and 448 (126) -> 448; beyond 448 clamps.
  EXPECT_EQ(e4m3fn_round(432.0f), 448.0f);
  EXPECT_EQ(e4m3fn_round(1e30f), 448.0f);
  EXPECT_EQ(e4m3fn_round(-INFINITY), -448.0f);
  // a negative value that rounds to zero keeps its sign; -0 stays +0 as in the reference.
  EXPECT_TRUE(std::signbit(e4m3fn_round(-1e-9f)));
  EXPECT_FALSE(std::signbit(e4m3fn_round(-0.0f)));
  EXPECT_THROW(e4m3fn_round(std::nanf("")), Error);
}

TEST(KvQuant, E4m3MatchesTableSearchOnEveryBoundaryAndADenseSweep) {
  // every table value, every midpoint and one float step either side of each midpoint
  for (int i = 0; i < 126; ++i) {
    const float lo = e4m3fn_value(i), hi = e4m3fn_value(i + 1);
    const float mid = 0.5f * (lo + hi);
    for (float v : {lo, hi, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f)}) {
      ASSERT_EQ(double(e4m3fn_round(v)), ref_fp8_value(v)) << v;
      ASSERT_EQ(double(e4m3fn_round(-v)), ref_fp8_value(-v)) << -v;
    }
  }
  // every 509th float bit pattern from 0 up to 464 (past the clamp)
  const uint32_t end = std::bit_cast<uint32_t>(464.0f);
  for (uint32_t b = 0; b <= end; b += 509) {
    const float v = std::bit_cast<float>(b);
    ASSERT_EQ(double(e4m3fn_round(v)), ref_fp8_value(v)) << v;
  }
}

TEST(KvQuant, E2m1TiesAndSweep) {
  const struct { float in, out; } ties[] = {{0.25f, 0}, {0.75f, 1}, {1.25f, 1}, {1.75f, 2},
                                            {2.5f, 2},  {3.5f, 4},  {5.0f, 4},  {7.0f, 6}};
  for (const auto& t : ties) {
    EXPECT_EQ(e2m1_round(t.in), t.out) << t.in;
    EXPECT_EQ(e2m1_round(-t.in), -t.out) << t.in;
    EXPECT_EQ(double(e2m1_round(std::nextafter(t.in, 0.0f))), ref_fp4_value(std::nextafter(t.in, 0.0f)));
    EXPECT_EQ(double(e2m1_round(std::nextafter(t.in, 10.0f))), ref_fp4_value(std::nextafter(t.in, 10.0f)));
  }
  const uint32_t end = std::bit_cast<uint32_t>(7.0f);
  for (uint32_t b = 0; b <= end; b += 4099) {
    const float v = std::bit_cast<float>(b);
    ASSERT_EQ(double(e2m1_round(v)), ref_fp4_value(v)) << v;
  }
  EXPECT_THROW(e2m1_round(std::nanf("")), Error);
}

TEST(KvQuant, Fp8RowMatchesFloat64BlockReference) {
  // 7 blocks of 64 (the non-RoPE part of a 512-wide KV row), magnitudes spanning 2^-20..2^12,
  // plus rows of ordinary activations.
  for (uint32_t seed = 0; seed < 40; ++seed) {
    auto x = seed % 2 ? random_wide_vector(448, seed, -20, 12) : random_vector(448, seed, -5, 5);
    const auto want = ref_round_trip(x, 64, 1e-4, 448, ref_fp8_value);
    fp8_kv_round_trip(x);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(double(x[i]), want[i]) << "seed " << seed << " i " << i;
  }
}

TEST(KvQuant, Fp8HandComputedBlock) {
  // amax = 1: scale = 2^ceil(log2(1/448)) = 2^-8; 0.3 * 256 = 76.8 -> 80 -> 0.3125;
  // 0.01 * 256 = 2.56 -> 2.5 -> 0.009765625; 1 -> 256 -> 1.
  std::vector<float> x(64, 0.0f);
  x[0] = 1.0f;
  x[1] = 0.3f;
  x[2] = -0.01f;
  fp8_kv_round_trip(x);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], 0.3125f);
  EXPECT_EQ(x[2], -0.009765625f);
  EXPECT_EQ(x[3], 0.0f);
}

TEST(KvQuant, Fp8AmaxZeroTinyAndSubnormal) {
  std::vector<float> zeros(64, 0.0f);
  fp8_kv_round_trip(zeros);
  for (float v : zeros) EXPECT_EQ(v, 0.0f);
  // amax below the 1e-4 floor: scale 2^-22. 1e-6 * 2^22 = 4.19 -> 4 -> 4 * 2^-22.
  std::vector<float> tiny(64, 0.0f);
  tiny[0] = 1e-6f;
  tiny[1] = std::ldexp(1.0f, -140);  // subnormal: rounds to 0
  tiny[2] = -std::ldexp(1.0f, -149);
  fp8_kv_round_trip(tiny);
  EXPECT_EQ(tiny[0], std::ldexp(4.0f, -22));
  EXPECT_EQ(tiny[1], 0.0f);
  EXPECT_EQ(tiny[2], 0.0f);
  EXPECT_TRUE(std::signbit(tiny[2]));
}

TEST(KvQuant, Fp8HugeAmax) {
  auto x = random_vector(64, 77, -1e38f, 1e38f);
  x[5] = 1e38f;
  const auto want = ref_round_trip(x, 64, 1e-4, 448, ref_fp8_value);
  fp8_kv_round_trip(x);
  for (size_t i = 0; i < 64; ++i) ASSERT_EQ(double(x[i]), want[i]) << i;
  // amax = FLT_MAX: FLT_MAX / 2^120 = 255.99 rounds to 256, and 256 * 2^120 = 2^128 overflows
  // to inf, exactly as in the reference (documented in kv_quant.h).
  std::vector<float> y(64, 1.0f);
  y[0] = FLT_MAX;
  fp8_kv_round_trip(y);
  EXPECT_EQ(y[0], INFINITY);
  EXPECT_EQ(y[1], 0.0f);  // 2^-120 is below half the smallest step
}

TEST(KvQuant, NonFiniteAndBadSizesThrow) {
  std::vector<float> x(64, 1.0f);
  x[3] = INFINITY;
  EXPECT_THROW(fp8_kv_round_trip(x), Error);
  x[3] = std::nanf("");
  EXPECT_THROW(fp8_kv_round_trip(x), Error);
  std::vector<float> y(32, 1.0f);
  y[0] = -INFINITY;
  EXPECT_THROW(fp4_round_trip(y), Error);
  std::vector<float> odd4(33), h127(127), h128(128, 0.0f);
  EXPECT_THROW(fp4_round_trip(odd4), Error);
  EXPECT_THROW(hadamard(h127), Error);
  EXPECT_THROW(indexer_qat_row(h127), Error);
  h128[9] = std::nanf("");
  EXPECT_THROW(indexer_qat_row(h128), Error);
}

TEST(KvQuant, Fp4RowMatchesFloat64BlockReference) {
  for (uint32_t seed = 0; seed < 40; ++seed) {
    auto x = seed % 2 ? random_wide_vector(128, seed, -30, 30) : random_vector(128, seed, -3, 3);
    const auto want = ref_round_trip(x, 32, 7.052966104933725e-38, 6, ref_fp4_value);
    fp4_round_trip(x);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(double(x[i]), want[i]) << "seed " << seed << " i " << i;
  }
}

TEST(KvQuant, Fp4HandComputedAndSubnormals) {
  // amax 6 -> scale 1: values round on the plain grid.
  std::vector<float> x = {6.0f, 0.3f, -0.75f, 2.6f, 4.9f, -5.1f};
  x.resize(32, 0.0f);
  fp4_round_trip(x);
  EXPECT_EQ(x[0], 6.0f);
  EXPECT_EQ(x[1], 0.5f);
  EXPECT_EQ(x[2], -1.0f);
  EXPECT_EQ(x[3], 3.0f);
  EXPECT_EQ(x[4], 4.0f);
  EXPECT_EQ(x[5], -6.0f);
  // a block of subnormals: amax 2^-127 is below the floor, scale = 2^-126, 2^-127 -> 0.5 -> kept.
  std::vector<float> s(32, 0.0f);
  s[0] = std::ldexp(1.0f, -127);
  s[1] = std::ldexp(1.0f, -140);  // 2^-14 of a step: rounds to 0
  fp4_round_trip(s);
  EXPECT_EQ(s[0], std::ldexp(1.0f, -127));
  EXPECT_EQ(s[1], 0.0f);
  std::vector<float> z(32, 0.0f);
  fp4_round_trip(z);
  for (float v : z) EXPECT_EQ(v, 0.0f);
  // huge amax: scale 2^ceil(log2(2e38 / 6)) = 2^125; 2e38 / 2^125 = 4.70 -> 4 -> 2^127.
  std::vector<float> h(32, 0.0f);
  h[0] = 2e38f;
  fp4_round_trip(h);
  EXPECT_EQ(h[0], std::ldexp(1.0f, 127));
}

TEST(KvQuant, HadamardMatchesMatrixAndIsOrthonormal) {
  const auto x = random_vector(128, 5, -3, 3);
  auto y = x;
  hadamard(y);
  for (size_t i = 0; i < 128; ++i) {
    double acc = 0;
    for (size_t j = 0; j < 128; ++j) acc += (std::popcount(i & j) % 2 ? -1.0 : 1.0) * x[j];
    ASSERT_NEAR(y[i], acc / std::sqrt(128.0), 1e-5) << i;
  }
  hadamard(y);  // H is symmetric and orthonormal: H(Hx) = x
  for (size_t i = 0; i < 128; ++i) ASSERT_NEAR(y[i], x[i], 1e-5);
  std::vector<float> e0(128, 0.0f);
  e0[0] = 1.0f;
  hadamard(e0);
  for (float v : e0) EXPECT_FLOAT_EQ(v, 0.08838834764831845f);
}

TEST(KvQuant, IndexerQatIsHadamardThenFp4) {
  const auto x = random_vector(128, 6, -2, 2);
  std::vector<double> h(128);
  for (size_t i = 0; i < 128; ++i) {
    double acc = 0;
    for (size_t j = 0; j < 128; ++j) acc += (std::popcount(i & j) % 2 ? -1.0 : 1.0) * x[j];
    h[i] = acc / std::sqrt(128.0);
  }
  auto y = x;
  indexer_qat_row(y);
  size_t exact = 0;
  for (size_t b = 0; b < 128; b += 32) {
    double amax = 0;
    for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(h[b + i]));
    const double scale = std::ldexp(1.0, int(std::ceil(std::log2(amax / 6))));
    for (size_t i = 0; i < 32; ++i) {
      const double want = ref_fp4_value(h[b + i] / scale) * scale;
      exact += double(y[b + i]) == want;
      // float vs double Hadamard can only move a value across a rounding boundary: one step.
      ASSERT_LE(std::fabs(y[b + i] - want), 2 * scale + 1e-12) << b + i;
    }
  }
  EXPECT_GE(exact, 120u);
}

}  // namespace
}  // namespace ds4::model

namespace ds4::model {
namespace {

// Small test shapes: a trailing partial FP8 block is scaled on its own (the tiny model's
// 48 non-RoPE dims are one 48-value block), and a 32-wide Hadamard is orthonormal.
TEST(KvQuantShapes, PartialFp8BlockHasItsOwnScale) {
  std::vector<float> x(112);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i < 64 ? 100.0f : 0.01f) * std::sin(1.0f + static_cast<float>(i));
  std::vector<float> head(x.begin(), x.begin() + 64), tail(x.begin() + 64, x.end());
  fp8_kv_round_trip(x);
  fp8_kv_round_trip(head);
  fp8_kv_round_trip(tail);  // 48 values: one block with its own amax
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(x[i], head[i]);
  for (size_t i = 0; i < 48; ++i) EXPECT_EQ(x[64 + i], tail[i]);
  // The tail's own scale keeps small values accurate (relative error of E4M3 <= 1/16).
  for (size_t i = 0; i < 48; ++i) {
    const float ref = 0.01f * std::sin(65.0f + static_cast<float>(i));
    EXPECT_NEAR(tail[i], ref, std::fabs(ref) / 16 + 1e-9);
  }
}

TEST(KvQuantShapes, Hadamard32IsOrthonormal) {
  std::vector<float> x(32), y;
  for (size_t i = 0; i < 32; ++i) x[i] = std::cos(0.3f * static_cast<float>(i));
  y = x;
  hadamard(y);
  double n0 = 0, n1 = 0;
  for (size_t i = 0; i < 32; ++i) { n0 += x[i] * x[i]; n1 += y[i] * y[i]; }
  EXPECT_NEAR(n1, n0, 1e-5 * n0);
  // First output = sum / sqrt(32) (the all-ones row).
  double s = 0;
  for (float v : x) s += v;
  EXPECT_NEAR(y[0], s / std::sqrt(32.0), 1e-6);
  hadamard(y);
  for (size_t i = 0; i < 32; ++i) EXPECT_NEAR(y[i], x[i], 1e-6);
  std::vector<float> bad(48);
  EXPECT_THROW(hadamard(bad), Error);
}

}  // namespace
}  // namespace ds4::model
