// Expert SwiGLU (model-spec §3.5): asymmetric clamp, router weight in mid, float64 reference,
// extreme inputs.
#include "model/experts.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "model_test_util.h"

namespace ds4::model {
namespace {

using testing::expect_near_all;
using testing::random_vector;

double ref_silu(double z) { return z / (1.0 + std::exp(-z)); }

TEST(Experts, MatchesFloat64WithClampAndWeight) {
  const auto g = random_vector(2048, 1, -15, 15);
  const auto u = random_vector(2048, 2, -15, 15);
  std::vector<float> out(2048);
  expert_swiglu(g, u, kSwigluClamp, 0.37f, out);
  std::vector<double> want(2048);
  for (size_t i = 0; i < 2048; ++i) {
    const double gc = std::min(double(g[i]), 10.0);
    const double uc = std::clamp(double(u[i]), -10.0, 10.0);
    want[i] = ref_silu(gc) * uc * 0.37f;
  }
  expect_near_all(out, want, 1e-6, 1e-6);
}

TEST(Experts, ClampIsAsymmetric) {
  // gate 20 -> 10; gate -20 is not clamped; up 15 -> 10, up -15 -> -10.
  const std::vector<float> g = {20.0f, -20.0f, 20.0f}, u = {15.0f, 1.0f, -15.0f};
  std::vector<float> out(3);
  expert_swiglu(g, u, 10.0f, 1.0f, out);
  EXPECT_NEAR(out[0], ref_silu(10) * 10, 1e-5);
  EXPECT_NEAR(out[1], ref_silu(-20), 1e-12);  // -20 * e^-20 / (1 + e^-20) = -4.1e-8
  EXPECT_LT(out[1], 0.0f);
  EXPECT_NEAR(out[2], ref_silu(10) * -10, 1e-5);
  // clamp <= 1e-6 disables clamping (as the reference).
  expert_swiglu(g, u, 0.0f, 2.0f, out);
  EXPECT_NEAR(out[0], ref_silu(20) * 15 * 2, 1e-4);
}

TEST(Experts, SiluExtremes) {
  EXPECT_EQ(silu(0.0f), 0.0f);
  EXPECT_EQ(silu(1e4f), 1e4f);
  EXPECT_EQ(silu(-1e4f), -0.0f);  // exp underflows to 0: -1e4 * 0, never NaN
  EXPECT_NEAR(silu(-80.0f), ref_silu(-80.0), 1e-6 * std::fabs(ref_silu(-80.0)));
  EXPECT_NEAR(silu(80.0f), 80.0f, 1e-5);
}

TEST(Experts, SizeMismatchThrows) {
  std::vector<float> a(4), b(5);
  EXPECT_THROW(expert_swiglu(a, b, 10.0f, 1.0f, a), Error);
  EXPECT_THROW(expert_swiglu(a, a, 10.0f, 1.0f, b), Error);
}

}  // namespace
}  // namespace ds4::model
