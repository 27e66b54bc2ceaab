// Router (model-spec §3.5, failure-modes item 12): softplus against float64 over the whole
// range and at extremes (+-80, +-1e4, +-inf), top-k ties and bias, hash rows, the 2^-14 floor.
#include "model/router.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "common/error.h"
#include "model_test_util.h"

namespace ds4::model {
namespace {

using testing::random_vector;

// softplus in float64 without branches: max(z, 0) + log1p(exp(-|z|)).
double ref_softplus(double z) { return std::max(z, 0.0) + std::log1p(std::exp(-std::fabs(z))); }

TEST(Router, SoftplusMatchesFloat64AcrossTheRange) {
  for (double z = -110.0; z <= 110.0; z += 0.01) {
    const float zf = float(z);
    const double want = ref_softplus(zf);
    const float got = router_softplus(zf);
    if (want < FLT_MIN) {  // subnormal results: absolute error of one subnormal step
      ASSERT_NEAR(got, want, 1.5e-45) << z;
    } else {
      ASSERT_NEAR(got, want, 2.5e-7 * want) << z;  // a few f32 ulps, branches included
    }
  }
}

TEST(Router, ExtremeLogits) {
  EXPECT_FLOAT_EQ(router_softplus(80.0f), 80.0f);
  EXPECT_NEAR(router_softplus(-80.0f), std::exp(-80.0), 1e-6 * std::exp(-80.0));  // 1.8e-35
  EXPECT_EQ(router_softplus(1e4f), 1e4f);
  EXPECT_EQ(router_softplus(-1e4f), 0.0f);  // underflow to exactly 0, never negative or NaN
  EXPECT_EQ(router_softplus(-INFINITY), 0.0f);
  EXPECT_EQ(router_softplus(INFINITY), INFINITY);
  const std::vector<float> logits = {80, -80, 1e4f, -1e4f, -INFINITY, 0};
  std::vector<float> p(logits.size());
  router_probs(logits, p);
  EXPECT_NEAR(p[0], std::sqrt(80.0), 1e-6);
  EXPECT_NEAR(p[1], std::exp(-40.0), 1e-6 * std::exp(-40.0));
  EXPECT_EQ(p[2], 100.0f);
  EXPECT_EQ(p[3], 0.0f);
  EXPECT_EQ(p[4], 0.0f);
  EXPECT_NEAR(p[5], std::sqrt(std::log(2.0)), 1e-7);
}

TEST(Router, AllSelectedScoresUnderflowGivesZeroWeightsNotNaN) {
  std::vector<float> logits(256, -1e4f), p(256), w(6);
  router_probs(logits, p);
  std::vector<int32_t> sel(6);
  router_select_top_k(p, {}, sel);
  EXPECT_EQ(sel, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  router_weights(p, sel, 1.5f, w);
  for (float v : w) EXPECT_EQ(v, 0.0f);
  // Tiny but non-zero p: the sum is floored at 2^-14, so weights stay below the scale.
  std::fill(logits.begin(), logits.end(), -30.0f);  // p = exp(-15) = 3.06e-7, sum 1.8e-6
  router_probs(logits, p);
  router_weights(p, sel, 1.5f, w);
  for (float v : w) EXPECT_NEAR(v, std::exp(-15.0) / 6.103515625e-5 * 1.5, 1e-9);
}

TEST(Router, TopKTiesToLowerIdAndDescendingOrder) {
  std::vector<float> p(256, 1.0f);
  std::vector<int32_t> sel(6);
  router_select_top_k(p, {}, sel);
  EXPECT_EQ(sel, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  p[200] = 3.0f;
  p[100] = 3.0f;
  p[7] = 2.0f;
  router_select_top_k(p, {}, sel);
  EXPECT_EQ(sel, (std::vector<int32_t>{100, 200, 7, 0, 1, 2}));
}

TEST(Router, BiasSelectsButWeightsUseUnbiasedScores) {
  const std::vector<float> p = {1.0f, 2.0f, 3.0f, 4.0f};
  const std::vector<float> bias = {10.0f, 0.0f, 5.0f, 0.0f};  // selection scores 11, 2, 8, 4
  std::vector<int32_t> sel(2);
  router_select_top_k(p, bias, sel);
  EXPECT_EQ(sel, (std::vector<int32_t>{0, 2}));
  std::vector<float> w(2);
  router_weights(p, sel, 1.5f, w);
  EXPECT_FLOAT_EQ(w[0], 1.0f / 4.0f * 1.5f);  // p0 / (p0 + p2) * 1.5
  EXPECT_FLOAT_EQ(w[1], 3.0f / 4.0f * 1.5f);
}

TEST(Router, TopKMatchesStableSortReference) {
  for (uint32_t seed = 0; seed < 50; ++seed) {
    auto p = random_vector(256, seed, 0.0f, 3.0f);
    const auto bias = random_vector(256, seed + 1000, -0.5f, 0.5f);
    for (size_t i = 0; i < 256; i += 5) p[i] = std::round(p[i] * 2) / 2;  // ties
    std::vector<float> score(256);
    for (size_t i = 0; i < 256; ++i) score[i] = p[i] + bias[i];
    std::vector<int32_t> want(256);
    std::iota(want.begin(), want.end(), 0);
    std::stable_sort(want.begin(), want.end(), [&](int a, int b) { return score[a] > score[b]; });
    want.resize(6);
    std::vector<int32_t> sel(6);
    router_select_top_k(p, bias, sel);
    ASSERT_EQ(sel, want) << "seed " << seed;
    std::vector<float> w(6);
    router_weights(p, sel, 1.5f, w);
    double sum = 0;
    for (int e : sel) sum += p[e];
    for (size_t i = 0; i < 6; ++i) ASSERT_NEAR(w[i], p[sel[i]] / sum * 1.5, 1e-6);
  }
}

TEST(Router, NaNScoresAreNeverPreferred) {
  std::vector<float> p = {std::nanf(""), 1.0f, std::nanf(""), 0.5f};
  std::vector<int32_t> sel(3);
  router_select_top_k(p, {}, sel);
  EXPECT_EQ(sel, (std::vector<int32_t>{1, 3, 0}));
}

TEST(Router, HashSelection) {
  // 3 tokens x 2 experts.
  const std::vector<int32_t> table = {5, 6, 7, 8, 1, 0};
  std::vector<int32_t> sel(2);
  router_select_hash(table, 1, 16, sel);
  EXPECT_EQ(sel, (std::vector<int32_t>{7, 8}));
  router_select_hash(table, 2, 16, sel);
  EXPECT_EQ(sel, (std::vector<int32_t>{1, 0}));
  EXPECT_THROW(router_select_hash(table, 3, 16, sel), Error);
  EXPECT_THROW(router_select_hash(table, -1, 16, sel), Error);
  EXPECT_THROW(router_select_hash(table, 1, 8, sel), Error);  // expert 8 outside [0, 8)
  std::vector<int32_t> sel4(4);
  EXPECT_THROW(router_select_hash(table, 0, 16, sel4), Error);  // 6 ids are not rows of 4
}

TEST(Router, BadInputsThrow) {
  std::vector<float> p = {1, 2, 3}, w(2), bias_bad(2), out_bad(2);
  EXPECT_THROW(router_probs(p, out_bad), Error);
  std::vector<int32_t> sel(2), sel4(4);
  EXPECT_THROW(router_select_top_k(p, bias_bad, sel), Error);
  EXPECT_THROW(router_select_top_k(p, {}, sel4), Error);
  const std::vector<int32_t> bad_id = {0, 3};
  EXPECT_THROW(router_weights(p, bad_id, 1.5f, w), Error);
  const std::vector<int32_t> ok = {0, 1};
  std::vector<float> w3(3);
  EXPECT_THROW(router_weights(p, ok, 1.5f, w3), Error);
  std::vector<float> pinf = {INFINITY, 1.0f, 2.0f};
  EXPECT_THROW(router_weights(pinf, ok, 1.5f, w), Error);  // logit +inf
  std::vector<float> pnan = {std::nanf(""), 1.0f, 2.0f};
  try {  // a corrupt weight byte reaches the router as a NaN: refused, and the message points at the file
    router_weights(pnan, ok, 1.5f, w);
    ADD_FAILURE() << "a NaN score was accepted";
  } catch (const Error& e) {
    const std::string want = "expert 0 is nan (logit overflow or NaN; the model file's weights may be corrupt)";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ds4::model
