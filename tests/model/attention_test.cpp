// Sink attention (model-spec §3.4.8): float64 reference, hand case, no rows, extreme scores.
#include "model/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "model_test_util.h"

namespace ds4::model {
namespace {

using testing::expect_near_all;
using testing::random_vector;

std::vector<double> ref_attention(const std::vector<float>& q, const std::vector<float>& sinks,
                                  const std::vector<std::vector<float>>& rows, size_t dim) {
  const size_t heads = sinks.size();
  std::vector<double> out(heads * dim, 0.0);
  for (size_t h = 0; h < heads; ++h) {
    std::vector<double> s;
    double m = sinks[h];
    for (const auto& r : rows) {
      double dot = 0;
      for (size_t i = 0; i < dim; ++i) dot += double(q[h * dim + i]) * r[i];
      s.push_back(dot / std::sqrt(double(dim)));
      m = std::max(m, s.back());
    }
    double den = std::exp(sinks[h] - m);
    for (double v : s) den += std::exp(v - m);
    for (size_t j = 0; j < rows.size(); ++j) {
      for (size_t i = 0; i < dim; ++i) out[h * dim + i] += std::exp(s[j] - m) / den * rows[j][i];
    }
  }
  return out;
}

std::vector<const float*> pointers(const std::vector<std::vector<float>>& rows) {
  std::vector<const float*> p;
  for (const auto& r : rows) p.push_back(r.data());
  return p;
}

TEST(Attention, MatchesFloat64) {
  const size_t heads = 8, dim = 512;
  const auto q = random_vector(heads * dim, 1, -0.3f, 0.3f);
  const auto sinks = random_vector(heads, 2, -2, 2);
  std::vector<std::vector<float>> rows;
  for (uint32_t j = 0; j < 140; ++j) rows.push_back(random_vector(dim, 10 + j, -2, 2));
  std::vector<float> out(heads * dim), scratch(rows.size());
  sink_attention(q, sinks, pointers(rows), out, scratch);
  expect_near_all(out, ref_attention(q, sinks, rows, dim), 2e-6, 1e-5);
}

TEST(Attention, HandComputedSinkHalvesTheOnlyRow) {
  // D = 4, q = (2, 0, 0, 0), row = (1, 1, 1, 1): s = 2/sqrt(4) = 1; sink 1 -> weight 1/2.
  const std::vector<float> q = {2, 0, 0, 0}, sinks = {1.0f};
  const std::vector<std::vector<float>> rows = {{1, 1, 1, 1}};
  std::vector<float> out(4), scratch(1);
  sink_attention(q, sinks, pointers(rows), out, scratch);
  for (float v : out) EXPECT_FLOAT_EQ(v, 0.5f);
  // Two rows with scores 1 and 1 + ln 2 and sink -1e30 (no sink mass): weights 1/3, 2/3.
  const float a = 1.0f + std::log(2.0f);
  const std::vector<float> q2 = {2, 2 * a, 0, 0}, sinks2 = {-1e30f};
  const std::vector<std::vector<float>> rows2 = {{1, 0, 3, 0}, {0, 1, 0, 3}};
  std::vector<float> scratch2(2);
  sink_attention(q2, sinks2, pointers(rows2), out, scratch2);
  EXPECT_NEAR(out[0], 1.0 / 3, 1e-6);
  EXPECT_NEAR(out[1], 2.0 / 3, 1e-6);
  EXPECT_NEAR(out[2], 1.0, 1e-6);
  EXPECT_NEAR(out[3], 2.0, 1e-6);
}

TEST(Attention, NoRowsGivesZeroAndHugeScoresStayFinite) {
  const std::vector<float> q = random_vector(2 * 64, 3), sinks = {0.0f, 5.0f};
  std::vector<float> out(2 * 64, 7.0f), scratch;
  sink_attention(q, sinks, {}, out, scratch);
  for (float v : out) EXPECT_EQ(v, 0.0f);
  // scores around 1e4: max subtraction keeps exp finite; the larger row takes everything.
  std::vector<float> qb(64, 0.0f);
  qb[0] = 1e4f;
  const std::vector<std::vector<float>> rows = {std::vector<float>(64, 8.0f),
                                                std::vector<float>(64, 9.0f)};
  const std::vector<float> sink1 = {0.0f};
  std::vector<float> ob(64), sc(2);
  sink_attention(qb, sink1, pointers(rows), ob, sc);
  for (float v : ob) EXPECT_FLOAT_EQ(v, 9.0f);
}

TEST(Attention, BadInputsThrow) {
  std::vector<float> q(128), sinks(2), out(128), scratch(1), none;
  std::vector<float> row(64);
  std::vector<const float*> rows = {row.data(), row.data()};
  EXPECT_THROW(sink_attention(q, sinks, rows, out, scratch), Error);  // scratch too small
  std::vector<float> sc2(2), out_bad(127);
  EXPECT_THROW(sink_attention(q, sinks, rows, out_bad, sc2), Error);
  EXPECT_THROW(sink_attention(q, none, rows, out, sc2), Error);
  std::vector<float> sinks3(3);
  EXPECT_THROW(sink_attention(q, sinks3, rows, out, sc2), Error);
  EXPECT_THROW(sink_attention(q, sinks, rows, q, sc2), Error);  // out overlaps q
  std::vector<const float*> null_rows = {row.data(), nullptr};
  EXPECT_THROW(sink_attention(q, sinks, null_rows, out, sc2), Error);
}

}  // namespace
}  // namespace ds4::model
