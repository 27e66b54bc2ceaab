// RMSNorm (model-spec §3.1): float64 references, hand-computed cases, double accumulation.
#include "model/norms.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "model_test_util.h"

namespace ds4::model {
namespace {

using testing::expect_near_all;
using testing::random_vector;

std::vector<double> ref_rms_norm(const std::vector<float>& x, const std::vector<float>* w,
                                 double eps) {
  double ss = 0.0;
  for (float v : x) ss += static_cast<double>(v) * v;
  const double s = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * s * (w ? (*w)[i] : 1.0);
  return out;
}

TEST(Norms, WeightedMatchesFloat64Reference) {
  const auto x = random_vector(4096, 1, -3.0f, 3.0f);
  const auto w = random_vector(4096, 2, 0.5f, 1.5f);
  std::vector<float> out(x.size());
  rms_norm(x, w, out);
  expect_near_all(out, ref_rms_norm(x, &w, 1e-6), 1e-7, 1e-6);
}

TEST(Norms, UnweightedMatchesFloat64ReferenceOverStateWidth) {
  const auto x = random_vector(16384, 3, -20.0f, 20.0f);
  std::vector<float> out(x.size());
  rms_norm_unweighted(x, out);
  expect_near_all(out, ref_rms_norm(x, nullptr, 1e-6), 1e-7, 1e-6);
}

TEST(Norms, HandComputed) {
  // mean([3^2, 4^2]) = 12.5; with eps = 0: [3, 4] / sqrt(12.5) * [1, 2].
  std::vector<float> x = {3.0f, 4.0f}, w = {1.0f, 2.0f}, out(2);
  rms_norm(x, w, out, 0.0f);
  EXPECT_NEAR(out[0], 0.848528137423857, 1e-6 * 0.85);
  EXPECT_NEAR(out[1], 2.262741699796952, 1e-6 * 2.27);
  EXPECT_FLOAT_EQ(rms_scale(x, 0.0f), static_cast<float>(1.0 / std::sqrt(12.5)));
  // all ones: 1/sqrt(1 + 1e-6)
  std::vector<float> ones(8, 1.0f), o(8);
  rms_norm_unweighted(ones, o);
  for (float v : o) EXPECT_FLOAT_EQ(v, static_cast<float>(1.0 / std::sqrt(1.0 + 1e-6)));
}

TEST(Norms, ZeroVectorStaysZeroAndEpsBoundsScale) {
  std::vector<float> x(64, 0.0f), out(64, 5.0f);
  rms_norm_unweighted(x, out);
  for (float v : out) EXPECT_EQ(v, 0.0f);
  EXPECT_NEAR(rms_scale(x), 1000.0f, 1e-3);  // 1/sqrt(1e-6)
}

TEST(Norms, DoubleAccumulationSurvivesHugeAndTinyValues) {
  // 4096 * (1e19)^2 = 4e41 overflows an f32 sum but not the double one; the mean 1e38 fits
  // f32, so every output is 1. (A mean square above FLT_MAX gives scale 0, as in the reference.)
  std::vector<float> big(4096, 1e19f), out(4096);
  rms_norm_unweighted(big, out);
  for (float v : out) EXPECT_NEAR(v, 1.0f, 1e-6);
  // tiny values: mean square 1e-60 is dominated by eps, scale = 1000.
  std::vector<float> tiny(32, 1e-30f), o2(32);
  rms_norm_unweighted(tiny, o2);
  for (float v : o2) EXPECT_NEAR(v, 1e-27f, 1e-33);
}

TEST(Norms, InPlaceEqualsOutOfPlace) {
  auto x = random_vector(512, 4);
  const auto w = random_vector(512, 5);
  std::vector<float> out(512);
  rms_norm(x, w, out);
  rms_norm(x, w, x);
  EXPECT_EQ(x, out);
}

TEST(Norms, PerHeadNormalisesEachHeadIndependently) {
  const size_t heads = 8, dim = 512;
  auto x = random_vector(heads * dim, 6, -4.0f, 4.0f);
  for (size_t i = 0; i < dim; ++i) x[3 * dim + i] *= 100.0f;  // one loud head
  std::vector<double> want;
  for (size_t h = 0; h < heads; ++h) {
    std::vector<float> head(x.begin() + h * dim, x.begin() + (h + 1) * dim);
    const auto r = ref_rms_norm(head, nullptr, 1e-6);
    want.insert(want.end(), r.begin(), r.end());
  }
  rms_norm_heads(x, dim);
  expect_near_all(x, want, 1e-7, 1e-6);
}

TEST(Norms, BadInputsThrow) {
  std::vector<float> a(4), b(5), empty;
  EXPECT_THROW(rms_norm(a, b, a), Error);
  EXPECT_THROW(rms_norm(a, a, b), Error);
  EXPECT_THROW(rms_norm(empty, empty, empty), Error);
  EXPECT_THROW(rms_norm_unweighted(a, b), Error);
  EXPECT_THROW(rms_norm_unweighted(empty, empty), Error);
  EXPECT_THROW(rms_scale(empty), Error);
  EXPECT_THROW(rms_norm_heads(b, 2), Error);
  EXPECT_THROW(rms_norm_heads(a, 0), Error);
  EXPECT_THROW(rms_norm_heads(empty, 4), Error);
}

}  // namespace
}  // namespace ds4::model
