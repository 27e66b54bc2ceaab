// attention_heads / indexer_scores_rows: bit-identical to the one-call model functions for any
// thread count (the split paths are forced by sizes above the work threshold), close to a
// float64 evaluation of the spec formulas, and the same errors for bad input.
#include "backend/cpu/parallel_steps.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "model/attention.h"
#include "model/indexer.h"
#include "test_util.h"

namespace ds4::cpu {
namespace {

using testing::gaussian;
using testing::same_bits;

TEST(StepThreads, WorkItemsAndThreadsCapTheCount) {
  EXPECT_EQ(step_threads(1000, 64, 8), 1);
  EXPECT_EQ(step_threads(uint64_t{3} << 15, 64, 8), 3);
  EXPECT_EQ(step_threads(uint64_t{1} << 30, 2, 8), 2);
  EXPECT_EQ(step_threads(uint64_t{1} << 30, 64, 4), 4);
  EXPECT_EQ(step_threads(uint64_t{1} << 30, 0, 4), 1);
  EXPECT_EQ(step_threads(uint64_t{1} << 30, 64, 0), 1);
}

// Spec §3.4.8 in float64: softmax over the rows plus a sink logit, value-weighted sum of rows.
std::vector<double> attention_f64(const std::vector<float>& q, const std::vector<float>& sinks,
                                  const std::vector<const float*>& rows, size_t dim) {
  std::vector<double> out(q.size(), 0.0);
  for (size_t h = 0; h < sinks.size(); ++h) {
    std::vector<double> s(rows.size());
    double m = sinks[h];
    for (size_t j = 0; j < rows.size(); ++j) {
      double d = 0;
      for (size_t i = 0; i < dim; ++i) d += static_cast<double>(q[h * dim + i]) * rows[j][i];
      s[j] = d / std::sqrt(static_cast<double>(dim));
      m = std::max(m, s[j]);
    }
    double den = std::exp(sinks[h] - m);
    for (size_t j = 0; j < rows.size(); ++j) {
      const double p = std::exp(s[j] - m);
      den += p;
      for (size_t i = 0; i < dim; ++i) out[h * dim + i] += p * rows[j][i];
    }
    for (size_t i = 0; i < dim; ++i) out[h * dim + i] /= den;
  }
  return out;
}

TEST(AttentionHeads, BitIdenticalToSinkAttentionAndCloseToFloat64) {
  const size_t n_head = 8, dim = 64, n_rows = 300;  // 153,600 MACs: up to 4 threads
  const auto q = gaussian(n_head * dim, 1);
  const auto sinks = gaussian(n_head, 2);
  const auto kv = gaussian(n_rows * dim, 3);
  std::vector<const float*> rows;
  for (size_t j = 0; j < n_rows; ++j) rows.push_back(&kv[(j * 7 % n_rows) * dim]);  // any order
  std::vector<float> want(q.size()), scratch(n_rows);
  model::sink_attention(q, sinks, rows, want, scratch);
  const auto ref = attention_f64(q, sinks, rows, dim);
  for (size_t i = 0; i < q.size(); ++i) EXPECT_NEAR(want[i], ref[i], 1e-5);
  for (int threads : {1, 2, 3, 8}) {
    std::vector<float> got(q.size(), NAN), sc;
    attention_heads(q, sinks, rows, got, sc, threads);
    for (size_t i = 0; i < q.size(); ++i)
      ASSERT_TRUE(same_bits(got[i], want[i])) << "threads " << threads << " i " << i;
  }
}

TEST(AttentionHeads, NoRowsGiveZerosAndBadInputThrows) {
  const size_t n_head = 64, dim = 128, n_rows = 16;
  const auto q = gaussian(n_head * dim, 4);
  const auto sinks = gaussian(n_head, 5);
  const auto kv = gaussian(n_rows * dim, 6);
  std::vector<const float*> rows;
  for (size_t j = 0; j < n_rows; ++j) rows.push_back(&kv[j * dim]);
  std::vector<float> out(q.size(), 1.0f), sc;
  attention_heads(q, sinks, {}, out, sc, 2);
  for (float v : out) EXPECT_EQ(v, 0.0f);
  auto null_rows = rows;
  null_rows[3] = nullptr;
  EXPECT_THROW(attention_heads(q, sinks, null_rows, out, sc, 2), Error);
  std::vector<float> short_out(q.size() - dim);
  EXPECT_THROW(attention_heads(q, sinks, rows, short_out, sc, 2), Error);
  std::vector<float> both(q.begin(), q.end());
  EXPECT_THROW(attention_heads(both, sinks, rows, both, sc, 2), Error);  // out overlaps q
  EXPECT_THROW(attention_heads(std::span(q).first(q.size() - 1), sinks, rows, out, sc, 2), Error);
}

TEST(IndexerScoresRows, BitIdenticalToIndexerScoresAndCloseToFloat64) {
  const size_t n_head = 4, dim = 32, n_rows = 1001;  // 128,128 MACs: up to 3 threads
  const auto q = gaussian(n_head * dim, 7);
  const auto w = gaussian(n_head, 8);
  const auto rows = gaussian(n_rows * dim, 9);
  std::vector<float> want(n_rows);
  model::indexer_scores(q, w, rows, want);
  for (size_t c = 0; c < n_rows; ++c) {  // spec §3.4.7 steps 4-5 in float64
    double s = 0;
    for (size_t h = 0; h < n_head; ++h) {
      double d = 0;
      for (size_t i = 0; i < dim; ++i) d += static_cast<double>(q[h * dim + i]) * rows[c * dim + i];
      s += std::max(d, 0.0) * w[h] / std::sqrt(static_cast<double>(n_head * dim));
    }
    EXPECT_NEAR(want[c], s, 1e-5 * (1 + std::fabs(s)));
  }
  for (int threads : {1, 2, 3, 8}) {
    std::vector<float> got(n_rows, NAN);
    indexer_scores_rows(q, w, rows, got, threads);
    for (size_t c = 0; c < n_rows; ++c)
      ASSERT_TRUE(same_bits(got[c], want[c])) << "threads " << threads << " row " << c;
  }
  std::vector<float> bad(n_rows - 1);
  EXPECT_THROW(indexer_scores_rows(q, w, rows, bad, 2), Error);
  EXPECT_THROW(indexer_scores_rows(std::span(q).first(q.size() - 1), w, rows, want, 2), Error);
}

}  // namespace
}  // namespace ds4::cpu
