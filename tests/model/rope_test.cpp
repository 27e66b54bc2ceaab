// Tail RoPE (model-spec §1.4, §3.4.3): derived YaRN numbers, hand-computed angles, float64
// reference, inverse round trip, untouched head prefix, f32 iterative angles.
#include "model/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "common/error.h"
#include "model_test_util.h"

namespace ds4::model {
namespace {

using testing::random_vector;

// theta_k(p) from the spec text, float64, pow per pair.
double ref_theta(double base, double n_rot, double p, int k, bool yarn, double fs, double low,
                 double high) {
  const double ext = p * std::pow(base, -2.0 * k / n_rot);
  if (!yarn) return ext;
  const double ramp = 1.0 - std::clamp((k - low) / std::max(0.001, high - low), 0.0, 1.0);
  return ext * fs * (1.0 - ramp) + ext * ramp;
}

// Forward/inverse rotation of the tail of each head in float64.
std::vector<double> ref_rope(const std::vector<float>& x, size_t head_dim, size_t n_rot,
                             double base, double p, bool yarn, bool inverse, double fs = 1,
                             double low = 0, double high = 0) {
  std::vector<double> out(x.begin(), x.end());
  for (size_t off = 0; off < x.size(); off += head_dim) {
    for (size_t k = 0; k < n_rot / 2; ++k) {
      const double th = ref_theta(base, double(n_rot), p, int(k), yarn, fs, low, high);
      const double c = std::cos(th), s = (inverse ? -1 : 1) * std::sin(th);
      const size_t i = off + head_dim - n_rot + 2 * k;
      out[i] = x[i] * c - x[i + 1] * s;
      out[i + 1] = x[i] * s + x[i + 1] * c;
    }
  }
  return out;
}

// Tolerance for an f32 angle computed by an iterative product: the angle error grows with the
// angle and with the number of products.
double angle_tol(double theta, size_t k) { return 2e-7 * std::fabs(theta) * double(k + 2) + 1e-6; }

TEST(Rope, DerivedYarnNumbersOfTheModel) {
  EXPECT_NEAR(rope_yarn_corr_dim(64, 65536, 32.0f, 160000.0f), 15.453295, 1e-4);
  EXPECT_NEAR(rope_yarn_corr_dim(64, 65536, 1.0f, 160000.0f), 24.708424, 1e-4);
  const RopeConfig cfg;
  const RopeParams dense = rope_params_for_layer(cfg, 0);
  EXPECT_FALSE(dense.yarn);
  EXPECT_EQ(dense.freq_base, 10000.0f);
  EXPECT_EQ(dense.freq_scale, 1.0f);
  for (uint32_t ratio : {4u, 128u}) {
    const RopeParams comp = rope_params_for_layer(cfg, ratio);
    EXPECT_TRUE(comp.yarn);
    EXPECT_EQ(comp.freq_base, 160000.0f);
    EXPECT_EQ(comp.freq_scale, 1.0f / 16.0f);
    EXPECT_EQ(comp.corr_low, 15.0f);
    EXPECT_EQ(comp.corr_high, 25.0f);
    EXPECT_EQ(comp.n_rot, 64u);
  }
  RopeConfig unscaled;
  unscaled.scale_factor = 1.0f;
  const RopeParams plain_comp = rope_params_for_layer(unscaled, 4);
  EXPECT_FALSE(plain_comp.yarn);
  EXPECT_EQ(plain_comp.freq_base, 160000.0f);
}

TEST(Rope, HandComputedAngle) {
  // Plain base 10000, n_rot 64, p = 3, pair k = 2: theta = 3 * 10000^(-4/64) = 1.68702397557.
  const RopeParams p = rope_params_plain(10000.0f, 64);
  std::vector<float> x(64, 0.0f);
  x[4] = 1.0f;  // pair 2 = (1, 0) -> (cos, sin)
  rope_tail(x, 64, p, 3, false);
  EXPECT_NEAR(x[4], std::cos(1.6870239755710472), 1e-6);
  EXPECT_NEAR(x[5], std::sin(1.6870239755710472), 1e-6);
  // Inverse of (0, 1): (sin, cos) of -theta applied: (0*c + 1*s, -0*s + 1*c) = (sin, cos).
  std::vector<float> y(64, 0.0f);
  y[5] = 1.0f;
  rope_tail(y, 64, p, 3, true);
  EXPECT_NEAR(y[4], std::sin(1.6870239755710472), 1e-6);
  EXPECT_NEAR(y[5], std::cos(1.6870239755710472), 1e-6);
}

TEST(Rope, YarnBlendByPair) {
  // Compressed layers: k <= 15 keeps theta_ext, k >= 25 uses theta_ext/16, k = 20 is halfway:
  // theta = theta_ext * (0.5/16 + 0.5) = 0.53125 theta_ext.
  const RopeParams p = rope_params_for_layer(RopeConfig{}, 4);
  std::vector<float> c(32), s(32);
  const uint32_t pos = 1000;
  rope_angles(p, pos, c, s);
  auto ext = [&](int k) { return pos * std::pow(160000.0, -2.0 * k / 64); };
  const struct { int k; double factor; } cases[] = {
      {0, 1.0}, {10, 1.0}, {15, 1.0}, {20, 0.53125}, {24, 0.1 * 1.0 + 0.9 / 16}, {25, 1.0 / 16},
      {31, 1.0 / 16}};
  for (const auto& t : cases) {
    const double th = ext(t.k) * t.factor;
    EXPECT_NEAR(c[t.k], std::cos(th), angle_tol(th, t.k)) << "k " << t.k;
    EXPECT_NEAR(s[t.k], std::sin(th), angle_tol(th, t.k)) << "k " << t.k;
  }
}

TEST(Rope, MatchesFloat64ReferenceOnManyHeads) {
  const size_t heads = 64, dim = 512, n_rot = 64;
  const RopeParams plain = rope_params_plain(10000.0f, 64);
  const RopeParams yarn = rope_params_for_layer(RopeConfig{}, 128);
  for (uint32_t pos : {0u, 1u, 7u, 127u, 128u, 1000u, 4095u, 65537u}) {
    for (bool inverse : {false, true}) {
      for (int kind = 0; kind < 2; ++kind) {
        const RopeParams& p = kind ? yarn : plain;
        auto x = random_vector(heads * dim, 100 + pos + kind, -2.0f, 2.0f);
        const auto want = kind ? ref_rope(x, dim, n_rot, 160000, pos, true, inverse, 1.0 / 16,
                                          15, 25)
                               : ref_rope(x, dim, n_rot, 10000, pos, false, inverse);
        rope_tail(x, dim, p, pos, inverse);
        for (size_t i = 0; i < x.size(); ++i) {
          const size_t j = i % dim;
          if (j < dim - n_rot) {
            ASSERT_EQ(double(x[i]), want[i]) << "prefix must be untouched, index " << i;
            continue;
          }
          const size_t k = (j - (dim - n_rot)) / 2;
          const double th = ref_theta(kind ? 160000 : 10000, 64, pos, int(k), kind, 1.0 / 16, 15, 25);
          ASSERT_NEAR(x[i], want[i], 2.0 * 2.0 * angle_tol(th, k) + 1e-6)
              << "pos " << pos << " kind " << kind << " index " << i;
        }
      }
    }
  }
}

TEST(Rope, InverseUndoesForward) {
  const RopeParams params[] = {rope_params_plain(10000.0f, 64),
                               rope_params_for_layer(RopeConfig{}, 4)};
  for (const RopeParams& p : params) {
    for (uint32_t pos : {0u, 3u, 511u, 100000u, 1000000u}) {
      const auto orig = random_vector(8 * 128, pos + 7, -1.0f, 1.0f);
      auto x = orig;
      rope_tail(x, 128, p, pos, false);
      rope_tail(x, 128, p, pos, true);
      for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], orig[i], 1e-6) << "pos " << pos;
    }
  }
}

TEST(Rope, PositionZeroIsIdentityAndPairsKeepTheirLength) {
  const RopeParams p = rope_params_for_layer(RopeConfig{}, 4);
  auto x = random_vector(2 * 128, 9);
  const auto orig = x;
  rope_tail(x, 128, p, 0, false);
  EXPECT_EQ(x, orig);
  rope_tail(x, 128, p, 777, false);
  for (size_t i = 64; i < 128; i += 2) {
    const double before = std::hypot(double(orig[i]), double(orig[i + 1]));
    EXPECT_NEAR(std::hypot(double(x[i]), double(x[i + 1])), before, 1e-6);
  }
}

TEST(Rope, AnglesAreTheIterativeF32ProductOfTheCpuReference) {
  // theta_ext(k+1) = theta_ext(k) * powf(base, -2/64) in f32, theta_ext(0) = f32(p).
  const RopeParams p = rope_params_plain(10000.0f, 64);
  const float ratio = std::pow(10000.0f, -2.0f / 64.0f);
  EXPECT_EQ(p.theta_scale, ratio);
  for (uint32_t pos : {1u, 12345u, 1u << 20}) {
    std::vector<float> c(32), s(32);
    rope_angles(p, pos, c, s);
    float th = static_cast<float>(pos);
    for (size_t k = 0; k < 32; ++k) {
      EXPECT_EQ(c[k], std::cos(th)) << "pos " << pos << " k " << k;
      EXPECT_EQ(s[k], std::sin(th)) << "pos " << pos << " k " << k;
      th *= ratio;
    }
  }
}

TEST(Rope, BadInputsThrow) {
  EXPECT_THROW(rope_params_plain(10000.0f, 63), Error);
  EXPECT_THROW(rope_params_plain(10000.0f, 0), Error);
  EXPECT_THROW(rope_params_plain(10000.0f, kMaxRopeDims + 2), Error);
  EXPECT_THROW(rope_params_plain(1.0f, 64), Error);
  EXPECT_THROW(rope_params_plain(std::nanf(""), 64), Error);
  EXPECT_THROW(rope_params_yarn(160000.0f, 1.0f, 65536, 32, 1, 64), Error);
  EXPECT_THROW(rope_params_yarn(160000.0f, 16.0f, 0, 32, 1, 64), Error);
  EXPECT_THROW(rope_params_yarn(160000.0f, 16.0f, 65536, 0, 1, 64), Error);
  RopeConfig bad;
  bad.scale_factor = 0.5f;
  EXPECT_THROW(rope_params_for_layer(bad, 4), Error);
  const RopeParams p = rope_params_plain(10000.0f, 64);
  std::vector<float> x(100), c(32), s(31);
  EXPECT_THROW(rope_tail(x, 32, p, 1, false), Error);   // tail wider than a head
  EXPECT_THROW(rope_tail(x, 64, p, 1, false), Error);   // not whole heads
  EXPECT_THROW(rope_angles(p, 1, c, s), Error);
  EXPECT_THROW(rope_tail_apply(x, 100, c, s, false), Error);
  EXPECT_THROW(rope_tail(x, 100, RopeParams{}, 1, false), Error);  // unset params
}

}  // namespace
}  // namespace ds4::model
