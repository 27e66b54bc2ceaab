// Sampler: distributions checked against probabilities computed by hand in the test.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>

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

// The plain one-index argmax: the largest non-NaN entry other than `excluded`, ties to the lowest id.
int32_t reference_argmax(const std::vector<float>& l, int32_t excluded) {
  int32_t best = -1;
  for (size_t i = 0; i < l.size(); ++i) {
    if (std::isnan(l[i]) || static_cast<int32_t>(i) == excluded) continue;
    if (best < 0 || l[i] > l[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  }
  return best;
}

TEST(Sampler, ArgmaxEqualsOneIndexLoopAcrossBlocks) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Sizes around the 1,024-logit blocks and the 16-float vector steps, and the real vocabulary.
  for (const size_t n : {1, 15, 17, 1023, 1024, 1025, 4099, 129280}) {
    for (int trial = 0; trial < 12; ++trial) {
      std::vector<float> l(n);
      for (float& v : l) v = nd(rng);
      if (trial % 3 == 1)  // few distinct values: ties everywhere, signed zeros among them
        for (float& v : l) v = std::vector<float>{0.0f, -0.0f, 1.5f, -2.0f}[rng() % 4];
      if (trial % 4 == 2)
        for (size_t i = 0; i < n; i += 1 + rng() % 7) l[i] = nan;
      if (trial == 5) std::fill(l.begin(), l.end(), -inf);
      if (trial == 7) l[rng() % n] = inf;
      const int32_t ex = trial % 2 ? reference_argmax(l, -1) : static_cast<int32_t>(rng() % n);
      for (const int32_t excluded : {-1, ex}) {
        const int32_t want = reference_argmax(l, excluded);
        if (want < 0) {
          EXPECT_THROW(Sampler::argmax(l, excluded), Error) << "n=" << n << " trial " << trial;
        } else {
          EXPECT_EQ(Sampler::argmax(l, excluded), want) << "n=" << n << " trial " << trial << " excluded " << excluded;
        }
      }
    }
  }
  EXPECT_THROW(Sampler::argmax(std::vector<float>(3000, nan)), Error);
  EXPECT_EQ(Sampler::argmax(std::vector<float>{nan, -inf, nan}), 1);
  EXPECT_THROW(Sampler::argmax(std::vector<float>{2.0f}, 0), Error);
}

// The sampler before min-p cut its candidates: every non-NaN logit sorted, then top-k, min-p,
// top-p and the draw, with the same splitmix64 stream (sampler.cpp's constants).
struct ReferenceSampler {
  SamplerSettings st;
  uint64_t state;
  double uniform() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;
  }
  int32_t sample(const std::vector<float>& l) {
    std::vector<std::pair<float, int32_t>> c;
    for (size_t i = 0; i < l.size(); ++i)
      if (!std::isnan(l[i])) c.emplace_back(l[i], static_cast<int32_t>(i));
    std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    if (st.top_k > 0 && c.size() > static_cast<size_t>(st.top_k)) c.resize(static_cast<size_t>(st.top_k));
    std::vector<double> w(c.size());
    const double inv_t = 1.0 / st.temperature;
    for (size_t i = 0; i < c.size(); ++i) w[i] = std::exp((c[i].first - static_cast<double>(c[0].first)) * inv_t);
    size_t n = c.size();
    if (st.min_p > 0.0f) {
      size_t m = 1;
      while (m < n && w[m] >= st.min_p) ++m;
      n = m;
    }
    double mass = 0.0;
    for (size_t i = 0; i < n; ++i) mass += w[i];
    if (st.top_p < 1.0f) {
      double acc = 0.0;
      size_t m = 0;
      while (m < n) {
        acc += w[m++];
        if (acc >= st.top_p * mass) break;
      }
      n = std::max<size_t>(m, 1);
      mass = acc;
    }
    const double r = uniform() * mass;
    double acc = 0.0;
    for (size_t i = 0; i < n; ++i) {
      acc += w[i];
      if (r < acc) return c[i].second;
    }
    return c[n - 1].second;
  }
};

TEST(Sampler, MinPCutDrawsWhatTheFullSortDraws) {
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const std::vector<SamplerSettings> settings = {
      {.seed = 11},  // the chat defaults: temp 1, min-p 0.05
      {.temperature = 0.3f, .min_p = 0.2f, .seed = 12},
      {.temperature = 2.5f, .top_p = 0.9f, .min_p = 0.01f, .seed = 13},
      {.temperature = 1.0f, .top_k = 40, .min_p = 0.05f, .seed = 14},
      {.temperature = 0.7f, .min_p = 1.0f, .seed = 15},
      {.temperature = 1.0f, .top_p = 0.5f, .min_p = 0.0f, .seed = 16},
  };
  for (const SamplerSettings& set : settings) {
    Sampler s(set);
    ReferenceSampler ref{set, set.seed};
    for (int draw = 0; draw < 60; ++draw) {
      std::vector<float> l(draw % 3 ? 5000 : 129280);
      const float scale = draw % 2 ? 4.0f : 0.5f;
      for (float& v : l) v = scale * nd(rng);
      if (draw % 5 == 0)  // ties at the top and logits right at the cut
        for (size_t i = 0; i < 50; ++i) l[rng() % l.size()] = l[0];
      if (draw % 7 == 0) l[rng() % l.size()] = std::numeric_limits<float>::quiet_NaN();
      ASSERT_EQ(s.sample(l), ref.sample(l)) << "temp " << set.temperature << " draw " << draw;
    }
  }
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
