// Hyper-connections (model-spec §3.2, §3.3, §3.6): Sinkhorn by hand and against float64,
// weighted sum / post against float64, output-head weights, extreme control values.
#include "model/hyper_connections.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "common/f16.h"
#include "model_test_util.h"

namespace ds4::model {
namespace {

using testing::expect_near_all;
using testing::random_vector;

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

struct RefSplit {
  std::vector<double> pre, post, m;  // m[r][c] at m[n*r + c]
};

// Spec §3.3 steps 3-4 in float64, written from the spec text.
RefSplit ref_split(const std::vector<float>& mix, const std::vector<float>& scale,
                   const std::vector<float>& base, size_t n, int iters, double eps) {
  RefSplit s;
  for (size_t i = 0; i < n; ++i) s.pre.push_back(sigmoid(mix[i] * double(scale[0]) + base[i]) + eps);
  for (size_t i = 0; i < n; ++i) {
    s.post.push_back(2.0 * sigmoid(mix[n + i] * double(scale[1]) + base[n + i]));
  }
  std::vector<double> l(n * n);
  for (size_t k = 0; k < n * n; ++k) l[k] = mix[2 * n + k] * double(scale[2]) + base[2 * n + k];
  s.m.assign(n * n, 0.0);
  for (size_t r = 0; r < n; ++r) {
    double mx = -1e300, sum = 0.0;
    for (size_t c = 0; c < n; ++c) mx = std::max(mx, l[n * r + c]);
    for (size_t c = 0; c < n; ++c) sum += std::exp(l[n * r + c] - mx);
    for (size_t c = 0; c < n; ++c) s.m[n * r + c] = std::exp(l[n * r + c] - mx) / sum + eps;
  }
  auto cols = [&] {
    for (size_t c = 0; c < n; ++c) {
      double sum = 0.0;
      for (size_t r = 0; r < n; ++r) sum += s.m[n * r + c];
      for (size_t r = 0; r < n; ++r) s.m[n * r + c] /= sum + eps;
    }
  };
  cols();
  for (int it = 1; it < iters; ++it) {
    for (size_t r = 0; r < n; ++r) {
      double sum = 0.0;
      for (size_t c = 0; c < n; ++c) sum += s.m[n * r + c];
      for (size_t c = 0; c < n; ++c) s.m[n * r + c] /= sum + eps;
    }
    cols();
  }
  return s;
}

struct Split {
  std::vector<float> pre, post, comb;
  explicit Split(size_t n) : pre(n), post(n), comb(n * n) {}
};

TEST(HyperConnections, Sinkhorn2x2ByHand) {
  // L = [[ln 3, 0], [0, 0]] (scale 1, base 0), eps = 0.
  // Iteration 1: rows softmax [3/4, 1/4], [1/2, 1/2]; columns: [3/5, 1/3], [2/5, 2/3].
  // Iteration 2: rows [9/14, 5/14], [3/8, 5/8]; columns: [36/57, 20/55], [21/57, 35/55].
  const std::vector<float> mix = {0, 0, 0, 0, std::log(3.0f), 0, 0, 0};
  const std::vector<float> scale = {1, 1, 1}, base(8, 0.0f);
  Split s1(2);
  hc_split_sinkhorn(mix, scale, base, 1, 0.0f, s1.pre, s1.post, s1.comb);
  EXPECT_NEAR(s1.comb[0], 3.0 / 5, 1e-6);  // M[0][0]
  EXPECT_NEAR(s1.comb[1], 1.0 / 3, 1e-6);  // M[0][1]
  EXPECT_NEAR(s1.comb[2], 2.0 / 5, 1e-6);  // M[1][0]
  EXPECT_NEAR(s1.comb[3], 2.0 / 3, 1e-6);  // M[1][1]
  Split s2(2);
  hc_split_sinkhorn(mix, scale, base, 2, 0.0f, s2.pre, s2.post, s2.comb);
  EXPECT_NEAR(s2.comb[0], 36.0 / 57, 1e-6);
  EXPECT_NEAR(s2.comb[1], 20.0 / 55, 1e-6);
  EXPECT_NEAR(s2.comb[2], 21.0 / 57, 1e-6);
  EXPECT_NEAR(s2.comb[3], 35.0 / 55, 1e-6);
  // pre = sigmoid(0) + 0 = 0.5, post = 2 sigmoid(0) = 1.
  for (float v : s2.pre) EXPECT_FLOAT_EQ(v, 0.5f);
  for (float v : s2.post) EXPECT_FLOAT_EQ(v, 1.0f);
}

TEST(HyperConnections, EpsSitsInsideEveryDenominator) {
  // Uniform logits, one iteration: rows give 1/n + eps; columns sum n(1/n + eps) and are
  // divided by that sum + eps. With eps = 0.25, n = 2: (0.75) / (1.5 + 0.25) = 3/7.
  const std::vector<float> mix(8, 0.0f), scale = {1, 1, 1}, base(8, 0.0f);
  Split s(2);
  hc_split_sinkhorn(mix, scale, base, 1, 0.25f, s.pre, s.post, s.comb);
  for (float v : s.comb) EXPECT_NEAR(v, 3.0 / 7, 1e-7);
  for (float v : s.pre) EXPECT_FLOAT_EQ(v, 0.75f);  // sigmoid(0) + eps
  // Second iteration: rows sum 6/7 -> (3/7)/(6/7 + 1/4) = 12/31; columns: 24/31 -> (12/31)/(24/31 + 1/4) = 48/127.
  hc_split_sinkhorn(mix, scale, base, 2, 0.25f, s.pre, s.post, s.comb);
  for (float v : s.comb) EXPECT_NEAR(v, 48.0 / 127, 1e-7);
}

TEST(HyperConnections, Sinkhorn4x4MatchesFloat64Reference) {
  for (uint32_t seed = 10; seed < 30; ++seed) {
    const auto mix = random_vector(24, seed, -3.0f, 3.0f);
    const auto scale = random_vector(3, seed + 100, 0.1f, 2.0f);
    const auto base = random_vector(24, seed + 200, -1.0f, 1.0f);
    Split s(4);
    hc_split_sinkhorn(mix, scale, base, 20, kHcEps, s.pre, s.post, s.comb);
    const auto r = ref_split(mix, scale, base, 4, 20, 1e-6);
    expect_near_all(s.pre, r.pre, 1e-7, 1e-6, "pre");
    expect_near_all(s.post, r.post, 1e-7, 1e-6, "post");
    expect_near_all(s.comb, r.m, 1e-6, 1e-5, "comb");
    for (size_t c = 0; c < 4; ++c) {  // columns are normalised last: sum = 1 - O(eps)
      double sum = 0;
      for (size_t row = 0; row < 4; ++row) sum += s.comb[c + 4 * row];
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
  }
}

TEST(HyperConnections, ExtremeControlValuesStayFinite) {
  std::vector<float> mix(24);
  for (size_t i = 0; i < 24; ++i) mix[i] = (i % 3 == 0) ? 1e4f : (i % 3 == 1 ? -1e4f : 80.0f);
  const std::vector<float> scale = {1, 1, 1}, base(24, 0.0f);
  Split s(4);
  hc_split_sinkhorn(mix, scale, base, 20, kHcEps, s.pre, s.post, s.comb);
  const auto r = ref_split(mix, scale, base, 4, 20, 1e-6);
  for (float v : s.pre) EXPECT_TRUE(std::isfinite(v));
  for (float v : s.comb) EXPECT_TRUE(std::isfinite(v));
  expect_near_all(s.pre, r.pre, 1e-7, 1e-6, "pre");
  expect_near_all(s.post, r.post, 1e-7, 1e-6, "post");
  expect_near_all(s.comb, r.m, 1e-6, 1e-5, "comb");
  EXPECT_FLOAT_EQ(s.pre[0], 1.0f + 1e-6f);  // sigmoid(1e4) + eps
  EXPECT_FLOAT_EQ(s.pre[1], 1e-6f);         // sigmoid(-1e4) + eps
}

TEST(HyperConnections, WeightedSumAndPostMatchFloat64) {
  const size_t n = 4, d = 4096;
  const auto x = random_vector(n * d, 40, -2.0f, 2.0f);
  const auto y = random_vector(d, 41, -2.0f, 2.0f);
  const auto w = random_vector(n, 42, 0.0f, 1.0f);
  const auto post = random_vector(n, 43, 0.0f, 2.0f);
  const auto comb = random_vector(n * n, 44, 0.0f, 1.0f);
  std::vector<float> xs(d), out(n * d);
  hc_weighted_sum(x, w, xs);
  hc_post(y, x, post, comb, out);
  std::vector<double> want_sum(d, 0.0), want_post(n * d);
  for (size_t i = 0; i < d; ++i) {
    for (size_t r = 0; r < n; ++r) want_sum[i] += double(w[r]) * x[r * d + i];
  }
  for (size_t c = 0; c < n; ++c) {
    for (size_t i = 0; i < d; ++i) {
      double acc = double(post[c]) * y[i];
      for (size_t r = 0; r < n; ++r) acc += double(comb[c + n * r]) * x[r * d + i];
      want_post[c * d + i] = acc;
    }
  }
  expect_near_all(xs, want_sum, 1e-6, 1e-6, "weighted sum");
  expect_near_all(out, want_post, 1e-6, 1e-6, "post");
}

TEST(HyperConnections, PostWithIdentityCombineAndZeroPostKeepsState) {
  const size_t n = 4, d = 16;
  const auto x = random_vector(n * d, 50);
  const auto y = random_vector(d, 51);
  std::vector<float> post(n, 0.0f), comb(n * n, 0.0f), out(n * d);
  for (size_t i = 0; i < n; ++i) comb[i + n * i] = 1.0f;
  hc_post(y, x, post, comb, out);
  EXPECT_EQ(out, x);
  // Permutation M[r][c] = 1 for c = (r + 1) % n moves stream r to stream r+1.
  std::fill(comb.begin(), comb.end(), 0.0f);
  for (size_t r = 0; r < n; ++r) comb[(r + 1) % n + n * r] = 1.0f;
  hc_post(y, x, post, comb, out);
  for (size_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < d; ++i) EXPECT_EQ(out[((r + 1) % n) * d + i], x[r * d + i]);
  }
}

TEST(HyperConnections, EmbeddingReplicationAndStateNorm) {
  const auto e = random_vector(64, 60);
  std::vector<float> x(4 * 64);
  hc_from_embedding(e, 4, x);
  for (size_t r = 0; r < 4; ++r) {
    for (size_t i = 0; i < 64; ++i) EXPECT_EQ(x[r * 64 + i], e[i]);
  }
  // The control mixes W_fn * RMSNorm(X): the state norm runs over all n*D values (identical
  // streams normalise like one stream), against a float64 evaluation of the spec's formula;
  // bit for bit, the projection of the raw state times rms_scale(X).
  const size_t rows = 3, cols = x.size();
  const std::vector<float> w = random_vector(rows * cols, 61, -0.1f, 0.1f);
  std::vector<float> mix(rows), raw(rows);
  const uint8_t* wb = reinterpret_cast<const uint8_t*>(w.data());
  hc_norm_projection(GgmlType::F32, wb, cols * 4, rows, x, kRmsEps, mix);
  double ss = 0;
  for (float v : e) ss += double(v) * v;
  const double s = 1.0 / std::sqrt(ss / 64 + 1e-6);
  hc_projection(GgmlType::F32, wb, cols * 4, rows, x, raw);
  for (size_t r = 0; r < rows; ++r) {
    double ref = 0, mag = 0;
    for (size_t i = 0; i < cols; ++i) {
      ref += double(w[r * cols + i]) * (x[i] * s);
      mag += std::fabs(double(w[r * cols + i]) * (x[i] * s));
    }
    EXPECT_NEAR(mix[r], ref, 1e-6 * mag) << r;
    EXPECT_EQ(mix[r], raw[r] * rms_scale(x, kRmsEps)) << r;
  }
  std::vector<float> none;
  EXPECT_THROW(hc_norm_projection(GgmlType::F32, wb, 0, 0, none, kRmsEps, {}), Error);
}

TEST(HyperConnections, OutputHeadWeights) {
  const std::vector<float> logits = {0.0f, 80.0f, -80.0f, 2.0f}, scale = {0.5f},
                           base = {0.0f, 0.0f, 0.0f, 1.0f};
  std::vector<float> w(4);
  hc_output_weights(logits, scale, base, w);
  const double want[4] = {0.5 + 1e-6, sigmoid(40) + 1e-6, sigmoid(-40) + 1e-6, sigmoid(2) + 1e-6};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(w[i], want[i], 1e-7 + 1e-6 * want[i]);
  EXPECT_NEAR(w[2], 1e-6, 1e-12);  // exp(-40) is far below eps
}

TEST(HyperConnections, BadInputsThrow) {
  std::vector<float> mix(24), scale(3), base(24), pre(4), post(4), comb(16);
  EXPECT_THROW(hc_split_sinkhorn(mix, scale, base, 0, kHcEps, pre, post, comb), Error);
  std::vector<float> short_mix(23);
  EXPECT_THROW(hc_split_sinkhorn(short_mix, scale, base, 20, kHcEps, pre, post, comb), Error);
  std::vector<float> none;
  EXPECT_THROW(hc_split_sinkhorn(mix, scale, base, 20, kHcEps, none, post, comb), Error);
  std::vector<float> scale2(2);
  EXPECT_THROW(hc_split_sinkhorn(mix, scale2, base, 20, kHcEps, pre, post, comb), Error);
  std::vector<float> big(17);
  std::vector<float> bigmix(hc_mix_count(17));
  std::vector<float> bigcomb(17 * 17);
  EXPECT_THROW(hc_split_sinkhorn(bigmix, scale, bigmix, 20, kHcEps, big, big, bigcomb), Error);

  std::vector<float> x(4 * 8), y(8), out(4 * 8), xs(8), xs_bad(7);
  EXPECT_THROW(hc_weighted_sum(x, pre, xs_bad), Error);
  EXPECT_THROW(hc_weighted_sum(x, none, xs), Error);
  EXPECT_THROW(hc_post(y, x, post, comb, xs), Error);
  EXPECT_THROW(hc_post(y, x, post, pre, out), Error);
  EXPECT_THROW(hc_post(y, x, post, comb, x), Error);  // in place is not allowed
  EXPECT_THROW(hc_post(std::span<const float>(out).first(8), x, post, comb, out), Error);
  EXPECT_THROW(hc_from_embedding(y, 0, x), Error);
  EXPECT_THROW(hc_from_embedding(y, 3, x), Error);
  std::vector<float> w(4), logits3(3);
  EXPECT_THROW(hc_output_weights(logits3, scale, pre, w), Error);
  EXPECT_THROW(hc_output_weights(pre, none, pre, w), Error);
}

// hc_projection's order, by hand: element 64 joins chain 0 (1e8 + 1 rounds to 1e8 in f32) before
// the tree adds chain 1's -1e8, so the row sums to 0; a sum in index order gives 1. The second
// row's 130 values (two full steps of 64 and two in a third) are i + 1 with weight 1: exact, 8515.
TEST(HcProjection, SumsInSixtyFourChainsThenAHalvingTree) {
  const size_t cols = 130;
  std::vector<float> w(2 * cols, 0.0f), flat(cols, 1.0f), mix(2);
  w[0] = 1.0e8f;
  w[1] = -1.0e8f;
  w[64] = 1.0f;
  for (size_t i = 0; i < cols; ++i) w[cols + i] = 1.0f;
  std::vector<float> flat2(cols);
  for (size_t i = 0; i < cols; ++i) flat2[i] = static_cast<float>(i + 1);
  hc_projection(GgmlType::F32, reinterpret_cast<const uint8_t*>(w.data()), cols * 4, 1, flat, {mix.data(), 1});
  EXPECT_EQ(mix[0], 0.0f);
  hc_projection(GgmlType::F32, reinterpret_cast<const uint8_t*>(w.data() + cols), cols * 4, 1, flat2, {mix.data(), 1});
  EXPECT_EQ(mix[0], 8515.0f);
}

// Random rows: within f32 rounding of the float64 dot; F16 and BF16 rows give exactly what F32
// rows holding their decoded values give; bad arguments are errors.
TEST(HcProjection, MatchesFloat64AndDecodesEveryFloatType) {
  const size_t rows = 24, cols = 1024;
  const std::vector<float> flat = random_vector(cols, 3);
  std::vector<uint16_t> h16(rows * cols), hb(rows * cols);
  std::vector<float> f32(rows * cols), f32b(rows * cols);
  const std::vector<float> src = random_vector(rows * cols, 4, -0.05f, 0.05f);
  for (size_t i = 0; i < src.size(); ++i) {
    h16[i] = f32_to_f16(src[i]);
    f32[i] = f16_to_f32(h16[i]);
    hb[i] = f32_to_bf16(src[i]);
    f32b[i] = bf16_to_f32(hb[i]);
  }
  std::vector<float> a(rows), b(rows), c(rows), d(rows);
  hc_projection(GgmlType::F16, reinterpret_cast<const uint8_t*>(h16.data()), cols * 2, rows, flat, a);
  hc_projection(GgmlType::F32, reinterpret_cast<const uint8_t*>(f32.data()), cols * 4, rows, flat, b);
  hc_projection(GgmlType::BF16, reinterpret_cast<const uint8_t*>(hb.data()), cols * 2, rows, flat, c);
  hc_projection(GgmlType::F32, reinterpret_cast<const uint8_t*>(f32b.data()), cols * 4, rows, flat, d);
  EXPECT_EQ(a, b);
  EXPECT_EQ(c, d);
  for (size_t r = 0; r < rows; ++r) {
    double ref = 0.0, mag = 0.0;
    for (size_t i = 0; i < cols; ++i) {
      ref += static_cast<double>(f32[r * cols + i]) * flat[i];
      mag += std::fabs(static_cast<double>(f32[r * cols + i]) * flat[i]);
    }
    EXPECT_NEAR(b[r], ref, 1e-6 * mag) << r;
  }
  const uint8_t* raw = reinterpret_cast<const uint8_t*>(f32.data());
  EXPECT_THROW(hc_projection(GgmlType::Q8_0, raw, cols * 4, rows, flat, b), Error);
  EXPECT_THROW(hc_projection(GgmlType::F32, raw, cols * 4 - 4, rows, flat, b), Error);
  EXPECT_THROW(hc_projection(GgmlType::F32, raw, cols * 4, rows, flat, {b.data(), rows - 1}), Error);
}

}  // namespace
}  // namespace ds4::model
