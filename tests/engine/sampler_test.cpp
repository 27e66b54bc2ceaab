// Sampler: distributions checked against probabilities computed by hand in the test.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "common/error.h"

namespace ds4 {
namespace {

std::map<int32_t, double> frequencies(Sampler& s, const std::vector<float>& logits, int draws) {
  std::map<int32_t, double> f;
  for (int i = 0; i < draws; ++i) f[s.sample(logits)] += 1.0 / draws;
  return f;
}

TEST(Sampler, GreedyTakesArgmaxWithTiesToLowestId) {
  Sampler s({.temperature = 0.0f, .seed = 1});
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 3.0f, -1.0f, 3.0f}), 1);
  EXPECT_EQ(Sampler::argmax(std::vector<float>{NAN, -5.0f, NAN}), 1);
}

TEST(Sampler, TemperatureOneFollowsSoftmax) {
  // logits ln(0.5), ln(0.3), ln(0.2): probabilities 0.5/0.3/0.2 exactly.
  const std::vector<float> logits{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler s({.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.0f, .seed = 42});
  auto f = frequencies(s, logits, 200000);
  EXPECT_NEAR(f[0], 0.5, 0.005);
  EXPECT_NEAR(f[1], 0.3, 0.005);
  EXPECT_NEAR(f[2], 0.2, 0.005);
}

TEST(Sampler, TemperatureTwoFlattens) {
  // p ∝ exp(l/2): logits 0 and ln 4 → weights 1 and 2 → 1/3, 2/3.
  const std::vector<float> logits{0.0f, std::log(4.0f)};
  Sampler s({.temperature = 2.0f, .min_p = 0.0f, .seed = 7});
  auto f = frequencies(s, logits, 200000);
  EXPECT_NEAR(f[0], 1.0 / 3.0, 0.005);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  // p = 0.5, 0.3, 0.2; min_p 0.5 keeps p >= 0.25 → tokens 0 and 1, renormalised 5/8, 3/8.
  const std::vector<float> logits{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler s({.temperature = 1.0f, .min_p = 0.5f, .seed = 3});
  auto f = frequencies(s, logits, 200000);
  EXPECT_EQ(f.count(2), 0u);
  EXPECT_NEAR(f[0], 0.625, 0.005);
}

TEST(Sampler, TopPKeepsSmallestNucleus) {
  // top_p 0.6 over 0.5/0.3/0.2: 0.5 < 0.6, 0.8 >= 0.6 → tokens 0, 1.
  const std::vector<float> logits{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler s({.temperature = 1.0f, .top_p = 0.6f, .min_p = 0.0f, .seed = 5});
  auto f = frequencies(s, logits, 100000);
  EXPECT_EQ(f.count(2), 0u);
  EXPECT_NEAR(f[1], 0.375, 0.006);
}

TEST(Sampler, TopKOneIsGreedy) {
  Sampler s({.temperature = 1.0f, .top_k = 1, .seed = 9});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(s.sample(std::vector<float>{1.0f, 1.5f, 1.4f}), 1);
}

TEST(Sampler, SameSeedSameSequence) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  Sampler a({.seed = 1234}), b({.seed = 1234});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.sample(logits), b.sample(logits));
}

TEST(Sampler, RejectsBadSettings) {
  EXPECT_THROW(Sampler({.temperature = -1.0f}), Error);
  EXPECT_THROW(Sampler({.top_p = 1.5f}), Error);
  EXPECT_THROW(Sampler({.min_p = -0.1f}), Error);
  EXPECT_THROW(Sampler({.top_k = -2}), Error);
  Sampler s({.seed = 1});
  EXPECT_THROW(s.sample(std::vector<float>{}), Error);
}

}  // namespace
}  // namespace ds4
