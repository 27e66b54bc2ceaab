// Streaming KV compressor (model-spec §3.4.5, §4.2): pooling against float64, emission schedule
// over positions 0..600, ratio-4 overlap and ratio-128 windows against a naive recomputation
// from the token history, the full emitted row against a float64 pipeline, prefill
// normalisation and snapshot restore.
#include "model/compressor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "model/rope.h"
#include "model_test_util.h"

namespace ds4::model {
namespace {

using testing::random_vector;

constexpr float kEmpty = -1.0e30f;

CompressorParams make_params(uint32_t ratio, uint32_t dim, CompressedRowKind kind) {
  CompressorParams p;
  p.ratio = ratio;
  p.head_dim = dim;
  p.kind = kind;
  p.rope = rope_params_for_layer(RopeConfig{}, ratio);
  return p;
}

// Per-token compressor inputs (kv and score rows of width coff*D, score including the APE).
struct History {
  std::vector<std::vector<float>> kv, score;
};

History make_history(uint32_t ratio, size_t width, size_t n, uint32_t seed) {
  const auto ape = random_vector(width * ratio, seed + 1, -1.0f, 1.0f);
  History h;
  for (size_t p = 0; p < n; ++p) {
    h.kv.push_back(random_vector(width, seed + 1000 + uint32_t(p), -2.0f, 2.0f));
    auto s = random_vector(width, seed + 500000 + uint32_t(p), -3.0f, 3.0f);
    compressor_add_ape(s, ape, ratio, uint32_t(p));
    h.score.push_back(std::move(s));
  }
  return h;
}

// Candidates of compressed row c for dim j in [0, D): (score, kv) pairs, from the spec text.
std::vector<std::pair<double, double>> candidates(const History& h, uint32_t ratio, size_t dim,
                                                  size_t c, size_t j) {
  std::vector<std::pair<double, double>> out;
  if (ratio == 4) {
    if (c > 0) {
      for (size_t t = 4 * c - 4; t < 4 * c; ++t) out.emplace_back(h.score[t][j], h.kv[t][j]);
    }
    for (size_t t = 4 * c; t < 4 * c + 4; ++t) {
      out.emplace_back(h.score[t][dim + j], h.kv[t][dim + j]);
    }
  } else {
    for (size_t t = ratio * c; t < ratio * (c + 1); ++t) out.emplace_back(h.score[t][j], h.kv[t][j]);
  }
  return out;
}

double ref_pool(const std::vector<std::pair<double, double>>& cand) {
  double m = -1e300, den = 0, num = 0;
  for (const auto& [s, v] : cand) m = std::max(m, s);
  for (const auto& [s, v] : cand) {
    den += std::exp(s - m);
    num += std::exp(s - m) * v;
  }
  return num / den;
}

TEST(Compressor, PoolRatio128MatchesFloat64) {
  const size_t d = 512, rows = 128;
  const auto kv = random_vector(rows * d, 1, -2, 2);
  const auto sc = random_vector(rows * d, 2, -6, 6);
  std::vector<float> out(d);
  compressor_pool(kv, sc, 128, out);
  for (size_t j = 0; j < d; ++j) {
    std::vector<std::pair<double, double>> cand;
    for (size_t r = 0; r < rows; ++r) cand.emplace_back(sc[r * d + j], kv[r * d + j]);
    ASSERT_NEAR(out[j], ref_pool(cand), 1e-6) << j;
  }
}

TEST(Compressor, PoolRatio4UsesFirstHalfOfPreviousAndSecondHalfOfCurrentRows) {
  const size_t d = 128, w = 2 * d;
  const auto kv = random_vector(8 * w, 3, -2, 2);
  const auto sc = random_vector(8 * w, 4, -6, 6);
  std::vector<float> out(d);
  compressor_pool(kv, sc, 4, out);
  for (size_t j = 0; j < d; ++j) {
    std::vector<std::pair<double, double>> cand;
    for (size_t r = 0; r < 4; ++r) cand.emplace_back(sc[r * w + j], kv[r * w + j]);
    for (size_t r = 4; r < 8; ++r) cand.emplace_back(sc[r * w + d + j], kv[r * w + d + j]);
    ASSERT_NEAR(out[j], ref_pool(cand), 1e-6) << j;
  }
}

TEST(Compressor, PoolAllMaskedDimensionIsZeroAndEmptyRowsContributeNothing) {
  const size_t d = 64, w = 2 * d;
  std::vector<float> kv(8 * w, 5.0f), sc(8 * w, kEmpty), out(d, 9.0f);
  compressor_pool(kv, sc, 4, out);
  for (float v : out) EXPECT_EQ(v, 0.0f);
  // Only dim 3 has one live candidate (current window row 6): it gets that kv exactly. A dim
  // whose best score is -6e29 (<= -5e29) still counts as all masked.
  sc[6 * w + d + 3] = 1.5f;
  kv[6 * w + d + 3] = -0.25f;
  for (size_t r = 0; r < 8; ++r) sc[r * w + d + 4] = -6e29f;
  compressor_pool(kv, sc, 4, out);
  EXPECT_EQ(out[3], -0.25f);
  EXPECT_EQ(out[4], 0.0f);
  // Extreme but live scores stay finite (max subtraction).
  for (size_t r = 0; r < 8; ++r) sc[r * w + 5] = sc[r * w + d + 5] = 1e4f;
  compressor_pool(kv, sc, 4, out);
  EXPECT_EQ(out[5], 5.0f);
}

TEST(Compressor, EmissionScheduleOverPositions0To600) {
  for (uint32_t ratio : {4u, 128u}) {
    for (CompressedRowKind kind : {CompressedRowKind::kAttention, CompressedRowKind::kIndexer}) {
      Compressor comp(make_params(ratio, 128, kind));
      const auto h = make_history(ratio, comp.width(), 601, 7);
      const std::vector<float> norm(128, 1.0f);
      std::vector<float> row(128);
      uint32_t rows = 0;
      for (uint32_t p = 0; p <= 600; ++p) {
        const bool emitted = comp.push(h.kv[p], h.score[p], p, norm, row);
        rows += emitted;
        ASSERT_EQ(emitted, (p + 1) % ratio == 0) << "ratio " << ratio << " p " << p;
        ASSERT_EQ(rows, (p + 1) / ratio) << "ratio " << ratio << " p " << p;
        ASSERT_EQ(comp.n_emitted(), (p + 1) / ratio);
        ASSERT_EQ(comp.n_tokens(), p + 1);
      }
    }
  }
}

// Rebuilds the frontier of compressed row c from the token history alone (the rows the pool
// must not read are filled with junk), then pools and finishes it.
std::vector<float> naive_row(const History& h, const CompressorParams& prm,
                             std::span<const float> norm, size_t c) {
  const uint32_t r = prm.ratio;
  const size_t d = prm.head_dim, coff = compressor_overlap(r), w = coff * d;
  auto kv = random_vector(coff * r * w, 99 + uint32_t(c), -1e3f, 1e3f);
  auto sc = random_vector(coff * r * w, 98 + uint32_t(c), -1e3f, 1e3f);
  auto put = [&](size_t row, size_t t, size_t lo, size_t hi) {
    for (size_t j = lo; j < hi; ++j) {
      kv[row * w + j] = t == SIZE_MAX ? 0.0f : h.kv[t][j];
      sc[row * w + j] = t == SIZE_MAX ? kEmpty : h.score[t][j];
    }
  };
  if (r == 4) {
    for (size_t i = 0; i < 4; ++i) put(i, c == 0 ? SIZE_MAX : 4 * c - 4 + i, 0, d);
    for (size_t i = 0; i < 4; ++i) put(4 + i, 4 * c + i, d, 2 * d);
  } else {
    for (size_t i = 0; i < r; ++i) put(i, r * c + i, 0, d);
  }
  std::vector<float> row(d);
  compressor_pool(kv, sc, r, row);
  compressor_finish_row(row, norm, prm, uint32_t(r * c));
  return row;
}

TEST(Compressor, StreamingFrontierEqualsNaiveRecomputationFromHistory) {
  for (uint32_t ratio : {4u, 128u}) {
    for (CompressedRowKind kind : {CompressedRowKind::kAttention, CompressedRowKind::kIndexer}) {
      const size_t d = kind == CompressedRowKind::kIndexer ? 128 : 512;
      const CompressorParams prm = make_params(ratio, uint32_t(d), kind);
      Compressor comp(prm);
      const auto h = make_history(ratio, comp.width(), 601, 11 + ratio);
      const auto norm = random_vector(d, 12, 0.5f, 1.5f);
      std::vector<float> row(d);
      for (uint32_t p = 0; p <= 600; ++p) {
        if (!comp.push(h.kv[p], h.score[p], p, norm, row)) continue;
        const size_t c = (p + 1) / ratio - 1;
        ASSERT_EQ(row, naive_row(h, prm, norm, c)) << "ratio " << ratio << " row " << c;
      }
    }
  }
}

// ---- full emitted row against an independent float64 pipeline ----

double ref_e4m3(int i) {
  const int e = (i >> 3) & 15, m = i & 7;
  return e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
}
double ref_fp8(double v) {
  const double a = std::min(std::fabs(v), 448.0);
  int best = 0;
  for (int i = 1; i < 127; ++i) {
    const double db = std::fabs(a - ref_e4m3(best)), di = std::fabs(a - ref_e4m3(i));
    if (di < db || (di == db && i % 2 == 0)) best = i;
  }
  return v < 0 ? -ref_e4m3(best) : ref_e4m3(best);
}

TEST(Compressor, AttentionRowMatchesFloat64Pipeline) {
  for (uint32_t ratio : {4u, 128u}) {
    const size_t d = 512, n_rot = 64;
    Compressor comp(make_params(ratio, 512, CompressedRowKind::kAttention));
    const auto h = make_history(ratio, comp.width(), 520, 21);
    const auto norm = random_vector(d, 22, 0.5f, 1.5f);
    std::vector<float> row(d);
    size_t exact = 0, total = 0;
    for (uint32_t p = 0; p < 520; ++p) {
      if (!comp.push(h.kv[p], h.score[p], p, norm, row)) continue;
      const size_t c = (p + 1) / ratio - 1;
      std::vector<double> want(d);
      for (size_t j = 0; j < d; ++j) want[j] = ref_pool(candidates(h, ratio, d, c, j));
      double ss = 0;
      for (double v : want) ss += v * v;
      const double s = 1.0 / std::sqrt(ss / d + 1e-6);
      for (size_t j = 0; j < d; ++j) want[j] *= s * norm[j];
      // RoPE at the window's first position, YaRN (base 160000, 1/16, low 15, high 25).
      const double pos = double(ratio * c);
      for (size_t k = 0; k < n_rot / 2; ++k) {
        const double ext = pos * std::pow(160000.0, -2.0 * k / 64);
        const double ramp = 1.0 - std::clamp((k - 15.0) / 10.0, 0.0, 1.0);
        const double th = ext / 16 * (1 - ramp) + ext * ramp;
        const size_t i = d - n_rot + 2 * k;
        const double x0 = want[i], x1 = want[i + 1];
        want[i] = x0 * std::cos(th) - x1 * std::sin(th);
        want[i + 1] = x0 * std::sin(th) + x1 * std::cos(th);
        // f32 angles: error grows with the angle and the pair index (see rope_test).
        const double tol = (std::fabs(x0) + std::fabs(x1)) * (2e-7 * th * double(k + 2) + 1e-6) + 1e-6;
        for (size_t t = i; t < i + 2; ++t) ASSERT_NEAR(row[t], want[t], tol) << "c " << c << " t " << t;
      }
      // FP8 on the 448 non-RoPE dims; float vs double rounding can flip a value by one step.
      for (size_t b = 0; b < d - n_rot; b += 64) {
        double amax = 1e-4;
        for (size_t i = b; i < b + 64; ++i) amax = std::max(amax, std::fabs(want[i]));
        const double scale = std::ldexp(1.0, int(std::ceil(std::log2(amax / 448))));
        for (size_t i = b; i < b + 64; ++i) {
          const double q = ref_fp8(want[i] / scale) * scale;
          const double step = std::ldexp(scale, std::max(-9, int(std::floor(std::log2(std::max(std::fabs(q), 1e-300) / scale))) - 3));
          ASSERT_LE(std::fabs(row[i] - q), step * 1.0000001) << "c " << c << " i " << i;
          exact += double(row[i]) == q;
          ++total;
        }
      }
    }
    EXPECT_GE(double(exact), 0.97 * double(total)) << "ratio " << ratio;
  }
}

TEST(Compressor, FinishPrefillClearsOnlyRowsThatWillBeOverwritten) {
  for (uint32_t ratio : {4u, 128u}) {
    for (uint32_t n : {1u, 5u, 6u, 8u, 127u, 128u, 130u, 259u}) {
      const CompressorParams prm = make_params(ratio, 128, CompressedRowKind::kIndexer);
      Compressor a(prm), b(prm);
      const auto h = make_history(ratio, a.width(), n + 300, 31 + n);
      const std::vector<float> norm(128, 1.0f);
      std::vector<float> ra(128), rb(128);
      for (uint32_t p = 0; p < n; ++p) {
        a.push(h.kv[p], h.score[p], p, norm, ra);
        b.push(h.kv[p], h.score[p], p, norm, rb);
      }
      const std::vector<float> kv_before(a.state_kv().begin(), a.state_kv().end());
      const std::vector<float> sc_before(a.state_score().begin(), a.state_score().end());
      a.finish_prefill();
      const size_t first = ratio == 4 ? 4 + n % 4 : n % ratio;
      const size_t w = a.width();
      for (size_t row = 0; row < a.state_rows(); ++row) {
        for (size_t j = 0; j < w; ++j) {
          const size_t i = row * w + j;
          if (row >= first) {
            ASSERT_EQ(a.state_kv()[i], 0.0f);
            ASSERT_EQ(a.state_score()[i], kEmpty);
          } else {
            ASSERT_EQ(a.state_kv()[i], kv_before[i]);
            ASSERT_EQ(a.state_score()[i], sc_before[i]);
          }
        }
      }
      for (uint32_t p = n; p < n + 300; ++p) {  // decoding on is unaffected
        const bool ea = a.push(h.kv[p], h.score[p], p, norm, ra);
        ASSERT_EQ(ea, b.push(h.kv[p], h.score[p], p, norm, rb));
        if (ea) {
          ASSERT_EQ(ra, rb) << "ratio " << ratio << " n " << n << " p " << p;
        }
      }
    }
  }
}

TEST(Compressor, SnapshotRestoreContinuesIdentically) {
  for (uint32_t ratio : {4u, 128u}) {
    const CompressorParams prm = make_params(ratio, 512, CompressedRowKind::kAttention);
    Compressor a(prm);
    const auto h = make_history(ratio, a.width(), 600, 41);
    const std::vector<float> norm(512, 1.0f);
    std::vector<float> ra(512), rb(512);
    for (uint32_t p = 0; p < 301; ++p) a.push(h.kv[p], h.score[p], p, norm, ra);
    EXPECT_EQ(a.state_kv().size(), ratio == 4 ? 8u * 1024 : 128u * 512);
    Compressor b(prm);
    b.restore(a.state_kv(), a.state_score(), a.n_tokens());
    size_t emitted = 0;
    for (uint32_t p = 301; p < 600; ++p) {
      const bool ea = a.push(h.kv[p], h.score[p], p, norm, ra);
      ASSERT_EQ(ea, b.push(h.kv[p], h.score[p], p, norm, rb));
      if (ea) {
        ASSERT_EQ(ra, rb) << "ratio " << ratio << " p " << p;
      }
      emitted += ea;
    }
    EXPECT_EQ(emitted, 600 / ratio - 301 / ratio);
    a.reset();
    EXPECT_EQ(a.n_tokens(), 0u);
    for (float v : a.state_score()) ASSERT_EQ(v, kEmpty);
  }
}

TEST(Compressor, ApeAddsTheRowOfThePositionModRatio) {
  std::vector<float> ape = {1, 2, 10, 20, 100, 200, 1000, 2000};  // 4 rows of width 2
  std::vector<float> s = {0.5f, 0.25f};
  compressor_add_ape(s, ape, 4, 6);  // row 2
  EXPECT_EQ(s[0], 100.5f);
  EXPECT_EQ(s[1], 200.25f);
  EXPECT_THROW(compressor_add_ape(s, ape, 3, 0), Error);
  EXPECT_THROW(compressor_add_ape(s, ape, 0, 0), Error);
}

TEST(Compressor, BadInputsThrow) {
  EXPECT_THROW(Compressor(make_params(0, 512, CompressedRowKind::kAttention)), Error);
  EXPECT_THROW(Compressor(make_params(4, 96, CompressedRowKind::kIndexer)), Error);   // not 2^k
  EXPECT_THROW(Compressor(make_params(4, 16, CompressedRowKind::kIndexer)), Error);   // < FP4 block
  EXPECT_THROW(Compressor(make_params(4, 32, CompressedRowKind::kAttention)), Error);
  CompressorParams unset = make_params(4, 512, CompressedRowKind::kAttention);
  unset.rope = RopeParams{};
  EXPECT_THROW(Compressor{unset}, Error);

  Compressor c(make_params(4, 128, CompressedRowKind::kIndexer));
  std::vector<float> kv(c.width()), sc(c.width()), norm(128), row(128), bad(7);
  EXPECT_THROW(c.push(kv, sc, 1, norm, row), Error);  // out of order: expects position 0
  EXPECT_THROW(c.push(bad, sc, 0, norm, row), Error);
  EXPECT_THROW(c.push(kv, bad, 0, norm, row), Error);
  EXPECT_THROW(c.push(kv, sc, 0, bad, row), Error);
  EXPECT_THROW(c.push(kv, sc, 0, norm, bad), Error);
  EXPECT_THROW(c.restore(bad, bad, 3), Error);
  EXPECT_THROW(compressor_pool(kv, sc, 4, row), Error);
  EXPECT_THROW(compressor_finish_row(bad, norm, c.params(), 0), Error);
}

}  // namespace
}  // namespace ds4::model
