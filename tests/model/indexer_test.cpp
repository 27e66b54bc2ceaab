// Indexer (model-spec §3.4.7): scores against float64 and by hand, top-k ties to the lower
// row id, the "only when more rows than top_k" rule, query preparation order.
#include "model/indexer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <vector>

#include "common/error.h"
#include "model_test_util.h"

namespace ds4::model {
namespace {

using testing::random_vector;

TEST(Indexer, ScoresByHand) {
  // 2 heads of dim 2, scale 1/sqrt(4) = 0.5. q0 = (1, 0), q1 = (0, 1), w = (2, -1).
  // row (3, 4): dots 3, 4 -> 0.5 * (2*3 - 1*4) = 1.  row (-1, 2): dots -1 -> 0, 2 -> -1.
  const std::vector<float> q = {1, 0, 0, 1}, w = {2, -1}, rows = {3, 4, -1, 2};
  std::vector<float> s(2);
  indexer_scores(q, w, rows, s);
  EXPECT_FLOAT_EQ(s[0], 1.0f);
  EXPECT_FLOAT_EQ(s[1], -1.0f);
}

TEST(Indexer, ScoresMatchFloat64) {
  const size_t heads = 64, dim = 128, n = 700;
  const auto q = random_vector(heads * dim, 1, -1, 1);
  const auto w = random_vector(heads, 2, -3, 3);
  const auto rows = random_vector(n * dim, 3, -1, 1);
  std::vector<float> s(n);
  indexer_scores(q, w, rows, s);
  const double scale = 1.0 / std::sqrt(64.0 * 128.0);
  for (size_t c = 0; c < n; ++c) {
    double want = 0, mag = 0;
    for (size_t h = 0; h < heads; ++h) {
      double dot = 0;
      for (size_t i = 0; i < dim; ++i) dot += double(q[h * dim + i]) * rows[c * dim + i];
      want += w[h] * scale * std::max(0.0, dot);
      mag += std::fabs(w[h] * scale) * 12.0;  // |dot| <= ~12 here; bounds f32 rounding
    }
    ASSERT_NEAR(s[c], want, 1e-6 * mag) << c;
  }
}

std::vector<uint32_t> ref_top_k(const std::vector<float>& s, size_t k) {
  std::vector<uint32_t> id(s.size());
  std::iota(id.begin(), id.end(), 0u);
  std::stable_sort(id.begin(), id.end(), [&](uint32_t a, uint32_t b) { return s[a] > s[b]; });
  id.resize(std::min(k, s.size()));
  std::sort(id.begin(), id.end());
  return id;
}

TEST(Indexer, TopKTiesGoToTheLowerRow) {
  std::vector<float> s(1000, 0.25f);  // all equal: rows 0..511
  std::vector<uint32_t> idx(1000);
  ASSERT_EQ(indexer_select_top_k(s, 512, idx), 512u);
  for (uint32_t i = 0; i < 512; ++i) ASSERT_EQ(idx[i], i);
  // a few winners, the rest tied: winners plus the lowest tied rows
  s[999] = 1.0f;
  s[700] = 2.0f;
  ASSERT_EQ(indexer_select_top_k(s, 4, idx), 4u);
  EXPECT_EQ(std::vector<uint32_t>(idx.begin(), idx.begin() + 4),
            (std::vector<uint32_t>{0, 1, 700, 999}));
}

TEST(Indexer, TopKMatchesStableSortReference) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    auto s = random_vector(513 + seed * 97, seed, -1, 1);
    for (size_t i = 0; i < s.size(); i += 3) s[i] = std::round(s[i] * 4) / 4;  // many ties
    std::vector<uint32_t> idx(s.size());
    const size_t n = indexer_select_top_k(s, 512, idx);
    ASSERT_EQ(n, 512u);
    EXPECT_EQ(std::vector<uint32_t>(idx.begin(), idx.begin() + 512), ref_top_k(s, 512));
  }
}

TEST(Indexer, AllRowsKeptWhenNotMoreThanTopK) {
  for (size_t n : {0, 1, 511, 512}) {
    std::vector<float> s = random_vector(n, 5);
    std::vector<uint32_t> idx(n);
    ASSERT_EQ(indexer_select_top_k(s, 512, idx), n);
    for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(idx[i], i);
  }
}

TEST(Indexer, NonFiniteScoresRankInOrder) {
  std::vector<float> s = {std::nanf(""), -INFINITY, 0.0f, INFINITY, -1e30f, std::nanf("")};
  std::vector<uint32_t> idx(s.size());
  ASSERT_EQ(indexer_select_top_k(s, 4, idx), 4u);
  EXPECT_EQ(std::vector<uint32_t>(idx.begin(), idx.begin() + 4),
            (std::vector<uint32_t>{1, 2, 3, 4}));
  ASSERT_EQ(indexer_select_top_k(s, 5, idx), 5u);
  EXPECT_EQ(std::vector<uint32_t>(idx.begin(), idx.begin() + 5),
            (std::vector<uint32_t>{0, 1, 2, 3, 4}));  // NaN last, lower NaN first
}

TEST(Indexer, PrepareQueryRotatesTailThenAppliesHadamardAndFp4) {
  // Heads whose tail is (1, 0, 0, ...) at pair 0 and zero elsewhere: after RoPE at p = 1 with
  // plain base 10000 the tail holds (cos 1, sin 1) at dims 64, 65; then H spreads them.
  const RopeParams rope = rope_params_plain(10000.0f, 64);
  std::vector<float> q(2 * 128, 0.0f);
  q[64] = 1.0f;
  q[128 + 64] = 1.0f;
  indexer_prepare_query(q, 128, rope, 1);
  const double c = std::cos(1.0), s = std::sin(1.0);
  for (size_t h = 0; h < 2; ++h) {
    // H row i: (-1)^popcount(i & j) / sqrt(128) at j = 64, 65.
    std::vector<double> hv(128);
    for (size_t i = 0; i < 128; ++i) {
      hv[i] = ((std::popcount(i & 64u) % 2 ? -c : c) + (std::popcount(i & 65u) % 2 ? -s : s)) /
              std::sqrt(128.0);
    }
    for (size_t b = 0; b < 128; b += 32) {
      double amax = 0;
      for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(hv[i]));
      const double scale = std::ldexp(1.0, int(std::ceil(std::log2(amax / 6))));
      for (size_t i = b; i < b + 32; ++i) {
        // |hv| takes only the values |c+s|/sqrt(128) = 0.1221 and |c-s|/sqrt(128) = 0.0266:
        // scale 2^ceil(log2(0.1221/6)) = 2^-5, 3.91 -> 4 and 0.85 -> 1.
        const double want = (hv[i] < 0 ? -1 : 1) * (std::fabs(hv[i]) > 0.1 ? 4.0 : 1.0) * scale;
        ASSERT_EQ(double(q[h * 128 + i]), want) << "head " << h << " i " << i;
      }
    }
  }
}

TEST(Indexer, BadInputsThrow) {
  std::vector<float> q(256), w(2), rows(128 * 3), s(3), s_bad(4), none;
  EXPECT_THROW(indexer_scores(q, none, rows, s), Error);
  EXPECT_THROW(indexer_scores(q, w, rows, s_bad), Error);
  std::vector<float> w3(3);
  EXPECT_THROW(indexer_scores(q, w3, rows, s), Error);
  std::vector<uint32_t> idx(2);
  EXPECT_THROW(indexer_select_top_k(s, 1, idx), Error);
  std::vector<float> q_bad(100);
  EXPECT_THROW(indexer_prepare_query(q_bad, 128, rope_params_plain(10000.0f, 64), 0), Error);
}

}  // namespace
}  // namespace ds4::model
