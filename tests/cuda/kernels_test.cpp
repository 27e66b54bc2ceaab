// Single CUDA kernels against the CPU units they port (src/model, src/quant), on inputs chosen
// to hit their edge cases: the radix-select top-k with ties, NaN and signed zeros; the
// block-parallel indexer QAT; the fused HC norm + projection; sink attention over wrapped windows,
// compressed and selected rows. Results must be bit-identical.
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/l2_prefetch.h"
#include "backend/cuda/launch_stream.h"
#include "common/error.h"
#include "common/f16.h"
#include "common/ggml_type.h"
#include "model/attention.h"
#include "model/compressor.h"
#include "model/experts.h"
#include "model/hyper_connections.h"
#include "model/indexer.h"
#include "model/kv_quant.h"
#include "model/norms.h"
#include "model/rope.h"
#include "model/router.h"
#include "quant/quant.h"

namespace ds4 {
namespace {

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    cuda::prepare_device(0);
  }
};

// The first n elements of a device array, on the host.
template <typename T>
std::vector<T> download(const cuda::DeviceArray<T>& d, size_t n) {
  std::vector<T> h(n);
  d.download(h.data(), n);
  return h;
}

// Top-k of n scores at the position whose ratio-4 row count is n, against the CPU selection.
std::vector<uint32_t> gpu_top_k(const std::vector<float>& scores, int64_t k) {
  const int64_t n = static_cast<int64_t>(scores.size());
  cuda::DeviceArray<float> s(scores.size());
  s.upload(scores.data(), scores.size());
  const int64_t pos = 4 * n - 1;  // (pos + 1) / 4 == n
  cuda::DeviceArray<int64_t> p(1);
  p.upload(&pos, 1);
  cuda::DeviceArray<uint32_t> sel(static_cast<size_t>(n + k));
  cuda::indexer_top_k(s.get(), p.get(), 4, n, k, sel.get());
  cuda::check(cudaDeviceSynchronize(), "top-k");
  std::vector<uint32_t> out(static_cast<size_t>(std::min(n, k)));
  sel.download(out.data(), out.size());
  return out;
}

std::vector<uint32_t> cpu_top_k(const std::vector<float>& scores, size_t k) {
  std::vector<uint32_t> idx(scores.size());
  const size_t m = model::indexer_select_top_k(scores, k, idx);
  idx.resize(m);
  return idx;
}

TEST_F(CudaKernels, TopKMatchesCpuWithTiesNanAndSignedZeros) {
  std::mt19937 rng(11);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Few distinct values: long runs of ties, so the lowest-id rule decides most of the selection.
  const std::vector<float> palette = {0.5f, -0.0f, 0.0f, nan, 1.25f, -inf, inf, -3.0f, 0.5f, 2.0f};
  for (const int64_t n : {5, 600, 5000, 70000}) {
    for (const int64_t k : {1, 7, 512}) {
      std::vector<float> s(static_cast<size_t>(n));
      for (float& v : s) v = palette[rng() % palette.size()];
      EXPECT_EQ(gpu_top_k(s, k), cpu_top_k(s, static_cast<size_t>(k))) << "palette n=" << n << " k=" << k;
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (float& v : s) v = nd(rng);
      EXPECT_EQ(gpu_top_k(s, k), cpu_top_k(s, static_cast<size_t>(k))) << "normal n=" << n << " k=" << k;
      // Two outliers at the ends of the float range: the kernel's value bins put nearly every
      // score into one bin (more than its shared-memory candidates for the larger n).
      s[1] = std::numeric_limits<float>::max();
      s[s.size() - 2] = std::numeric_limits<float>::lowest();
      EXPECT_EQ(gpu_top_k(s, k), cpu_top_k(s, static_cast<size_t>(k))) << "outliers n=" << n << " k=" << k;
      // Many magnitudes: a few bins hold most scores, the top ones spread thin.
      for (float& v : s) v = std::exp(8.0f * nd(rng)) * (rng() % 4 == 0 ? -1.0f : 1.0f);
      EXPECT_EQ(gpu_top_k(s, k), cpu_top_k(s, static_cast<size_t>(k))) << "magnitudes n=" << n << " k=" << k;
    }
  }
  // All NaN: the k lowest ids.
  std::vector<float> all_nan(1000, nan);
  EXPECT_EQ(gpu_top_k(all_nan, 512), cpu_top_k(all_nan, 512));
}

// Indexer scores of one token (and of a batch of tokens at different positions) against
// model::indexer_scores, bit for bit, for every head dim the kernel takes and head counts that
// leave a warp part-empty; row counts below, at and past the kernel's 16-row tiles and grid.
TEST_F(CudaKernels, IndexerScoresMatchCpu) {
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct Shape { int n_head; int64_t dim; };
  for (const Shape sh : {Shape{64, 128}, Shape{4, 32}, Shape{4, 64}, Shape{3, 8}, Shape{13, 256}, Shape{8, 16}}) {
    const int64_t max_rows = sh.dim == 128 ? 8200 : 700;
    std::vector<float> rows(static_cast<size_t>(max_rows * sh.dim));
    for (float& v : rows) v = nd(rng);
    for (int64_t i = 0; i < sh.dim; ++i) rows[static_cast<size_t>(2 * sh.dim + i)] = 0.0f;  // an all-zero row
    const int n_tok = 3;
    std::vector<float> q(static_cast<size_t>(n_tok * sh.n_head * sh.dim)), w(static_cast<size_t>(n_tok * sh.n_head));
    for (float& v : q) v = nd(rng);
    for (float& v : w) v = nd(rng);
    const std::vector<int64_t> n_rows = {max_rows, 17, 1};  // token t sees n_rows[t] rows
    std::vector<int64_t> pos(n_tok);
    for (int t = 0; t < n_tok; ++t) pos[static_cast<size_t>(t)] = 4 * n_rows[static_cast<size_t>(t)] + 2;
    cuda::DeviceArray<float> dq(q.size()), dw(w.size()), drows(rows.size());
    cuda::DeviceArray<float> ds(static_cast<size_t>(n_tok * max_rows));
    cuda::DeviceArray<int64_t> dpos(pos.size());
    dq.upload(q.data(), q.size());
    dw.upload(w.data(), w.size());
    drows.upload(rows.data(), rows.size());
    dpos.upload(pos.data(), pos.size());
    std::vector<std::vector<float>> want(n_tok);
    for (int t = 0; t < n_tok; ++t) {
      const size_t n = static_cast<size_t>(n_rows[static_cast<size_t>(t)]);
      want[static_cast<size_t>(t)].resize(n);
      model::indexer_scores({&q[static_cast<size_t>(t * sh.n_head * sh.dim)], static_cast<size_t>(sh.n_head * sh.dim)},
                            {&w[static_cast<size_t>(t * sh.n_head)], static_cast<size_t>(sh.n_head)},
                            {rows.data(), n * static_cast<size_t>(sh.dim)}, want[static_cast<size_t>(t)]);
    }
    const std::string shape = std::to_string(sh.n_head) + " x " + std::to_string(sh.dim);
    // One token: token 0's query and position, the grid for max_rows.
    cuda::indexer_scores(dq.get(), dw.get(), sh.n_head, sh.dim, drows.get(), dpos.get(), 4, max_rows, ds.get());
    cuda::check(cudaDeviceSynchronize(), "indexer scores");
    EXPECT_EQ(download(ds, want[0].size()), want[0]) << shape;
    cuda::indexer_scores_batch(dq.get(), dw.get(), sh.n_head, sh.dim, drows.get(), dpos.get(), 4, max_rows, ds.get(),
                               n_tok);
    cuda::check(cudaDeviceSynchronize(), "indexer scores batch");
    const std::vector<float> got = download(ds, ds.size());
    for (int t = 0; t < n_tok; ++t) {
      const auto first = got.begin() + t * max_rows;
      EXPECT_EQ(std::vector<float>(first, first + static_cast<int64_t>(want[static_cast<size_t>(t)].size())),
                want[static_cast<size_t>(t)]) << shape << " batch token " << t;
    }
  }
}

TEST_F(CudaKernels, IndexerQatMatchesCpuRows) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const int rows = 64;
  const int64_t dim = 128;
  std::vector<float> x(static_cast<size_t>(rows * dim));
  for (float& v : x) v = nd(rng);
  x[3] = 0.0f;
  for (int64_t i = 0; i < dim; ++i) {
    x[static_cast<size_t>(5 * dim + i)] = 0.0f;                 // an all-zero row
    x[static_cast<size_t>(6 * dim + i)] *= 1.0e-39f;            // subnormal: below the FP4 scale floor
    x[static_cast<size_t>(7 * dim + i)] = i == 9 ? 1.0e30f : 0.0f;  // one huge value
  }
  cuda::DeviceArray<float> d(x.size());
  d.upload(x.data(), x.size());
  cuda::indexer_qat(d.get(), rows, dim);
  cuda::check(cudaDeviceSynchronize(), "qat");
  std::vector<float> got(x.size());
  d.download(got.data(), got.size());
  for (int r = 0; r < rows; ++r) model::indexer_qat_row({&x[static_cast<size_t>(r * dim)], static_cast<size_t>(dim)});
  EXPECT_EQ(got, x);
}

// The KV row as the CPU stores it (spec §3.4.3): model::rms_norm with w, RoPE of the last
// 2 n_pair values at position pos (table rows of cos then sin), FP8 round trip of the first
// n_fp8 values, f16 rounding.
std::vector<float> cpu_kv_row(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& table,
                              int64_t pos, int n_pair, int64_t n_fp8) {
  std::vector<float> want(x.size());
  model::rms_norm(x, w, want, model::kRmsEps);
  const float* cs = &table[static_cast<size_t>(pos * 2 * n_pair)];
  model::rope_tail_apply(want, want.size(), {cs, static_cast<size_t>(n_pair)}, {cs + n_pair, static_cast<size_t>(n_pair)},
                         false);
  model::fp8_kv_round_trip(std::span<float>(want).first(static_cast<size_t>(n_fp8)));
  for (float& v : want) v = round_f16(v);
  return want;
}

// The KV row store (norm_rope with a ring, spec §3.4.2) against the CPU units in sequence:
// model::rms_norm, rope_tail_apply, fp8_kv_round_trip on the 448 non-RoPE values (7 blocks of
// 64), f16 rounding, bit for bit. Inputs are multiples of 1/8 (their squares sum exactly in f64,
// so the norm's scale is the same in any summation order); the blocks hit the round trip's
// cases: an all-zero block and one of tiny values (both below the FP8 scale floor), one with a
// large outlier, the rest random.
TEST_F(CudaKernels, KvRowStoreMatchesCpu) {
  std::mt19937 rng(17);
  const int64_t dim = 512, n_fp8 = 448, raw_cap = 8, pos = 5;
  const int n_pair = 32;
  std::vector<float> x(dim), w(dim), table(static_cast<size_t>((pos + 1) * 2 * n_pair));
  for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 129) - 64) / 8.0f;
  for (int64_t i = 0; i < 64; ++i) {
    x[static_cast<size_t>(64 + i)] = 0.0f;                           // block 1: zeros
    x[static_cast<size_t>(128 + i)] = (i % 2 ? -1.0f : 1.0f) / 8.0f;  // block 2: tiny after the weight
    w[static_cast<size_t>(128 + i)] = 1.0e-6f;
  }
  x[200] = 4096.0f;  // block 3: an outlier
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  for (int64_t i = 0; i < dim; ++i)
    if (i < 128 || i >= 192) w[static_cast<size_t>(i)] = 0.5f + 0.5f * ud(rng);
  for (float& v : table) v = ud(rng);
  cuda::DeviceArray<float> dx(x.size()), dw(w.size()), dt(table.size()), raw(static_cast<size_t>(raw_cap * dim));
  dx.upload(x.data(), x.size());
  dw.upload(w.data(), w.size());
  dt.upload(table.data(), table.size());
  cuda::DeviceArray<int64_t> dpos(1);
  dpos.upload(&pos, 1);
  cuda::norm_rope(dx.get(), dw.get(), dim, 1, model::kRmsEps, dt.get(), n_pair, dpos.get(), n_fp8, raw.get(), raw_cap);
  cuda::check(cudaDeviceSynchronize(), "norm_rope");
  const std::vector<float> want = cpu_kv_row(x, w, table, pos, n_pair, n_fp8);
  const std::vector<float> ring = download(raw, static_cast<size_t>(raw_cap * dim));
  EXPECT_EQ(std::vector<float>(ring.begin() + pos * dim, ring.begin() + (pos + 1) * dim), want);
  EXPECT_EQ(download(dx, x.size()), want);  // the row itself keeps the stored values
}

// q_kv_norm_rope (the decode step's query heads and KV row in one launch) against the CPU units:
// each query head model::rms_norm_heads then rope_tail_apply, the KV row as in KvRowStoreMatchesCpu
// (rms_norm, RoPE, FP8 round trip of the 448 non-RoPE values, f16 rounding, the ring row), bit for
// bit. Values are multiples of 1/8 so the norms' f64 sums are exact in any order.
TEST_F(CudaKernels, QueryAndKvRowNormOneLaunchMatchesCpu) {
  std::mt19937 rng(23);
  const int64_t dim = 512, n_fp8 = 448, raw_cap = 8, pos = 11;
  const int n_pair = 32, n_head = 5;
  std::vector<float> q(static_cast<size_t>(n_head * dim)), kv(dim), w(dim),
      table(static_cast<size_t>((pos + 1) * 2 * n_pair));
  for (float& v : q) v = static_cast<float>(static_cast<int>(rng() % 257) - 128) / 8.0f;
  for (float& v : kv) v = static_cast<float>(static_cast<int>(rng() % 129) - 64) / 8.0f;
  kv[300] = 2048.0f;  // an outlier in one FP8 block
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  for (float& v : w) v = 0.5f + 0.5f * ud(rng);
  for (float& v : table) v = ud(rng);
  cuda::DeviceArray<float> dq(q.size()), dkv(kv.size()), dw(w.size()), dt(table.size()),
      raw(static_cast<size_t>(raw_cap * dim));
  dq.upload(q.data(), q.size());
  dkv.upload(kv.data(), kv.size());
  dw.upload(w.data(), w.size());
  dt.upload(table.data(), table.size());
  cuda::DeviceArray<int64_t> dpos(1);
  dpos.upload(&pos, 1);
  cuda::q_kv_norm_rope(dq.get(), n_head, dkv.get(), dw.get(), dim, model::kRmsEps, dt.get(), n_pair, dpos.get(), n_fp8,
                       raw.get(), raw_cap);
  cuda::check(cudaDeviceSynchronize(), "q_kv_norm_rope");
  const float* cs = &table[static_cast<size_t>(pos * 2 * n_pair)];
  const std::span<const float> cos_p{cs, static_cast<size_t>(n_pair)}, sin_p{cs + n_pair, static_cast<size_t>(n_pair)};
  std::vector<float> want_q = q;
  model::rms_norm_heads(want_q, static_cast<size_t>(dim), model::kRmsEps);
  model::rope_tail_apply(want_q, static_cast<size_t>(dim), cos_p, sin_p, false);  // every head
  const std::vector<float> want_kv = cpu_kv_row(kv, w, table, pos, n_pair, n_fp8);
  EXPECT_EQ(download(dq, q.size()), want_q);
  EXPECT_EQ(download(dkv, kv.size()), want_kv);
  const std::vector<float> ring = download(raw, static_cast<size_t>(raw_cap * dim));
  EXPECT_EQ(std::vector<float>(ring.begin() + (pos % raw_cap) * dim, ring.begin() + (pos % raw_cap + 1) * dim), want_kv);
}

// compressor_push (one launch per position: the store, and on emission steps the pooling, norm,
// RoPE, quantization, f16 rounding and the ratio-4 lane shift) against model::Compressor::push
// position by position, bit for bit: the frontier state after every push and each emitted row
// (the GPU's rows are f16-rounded). A ratio-4 attention compressor (d 512: the FP8 round trip),
// a ratio-4 indexer one (d 128: the QAT) and a ratio-128 one; the first group's pooling meets the
// frontier's empty rows (score -1e30), and one column scores equal in every row (ties).
TEST_F(CudaKernels, CompressorPushMatchesCpu) {
  std::mt19937 rng(41);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.5f, 1.5f);
  struct Case { uint32_t ratio, d; model::CompressedRowKind kind; int steps; };
  const Case cases[] = {{4, 512, model::CompressedRowKind::kAttention, 13},
                        {4, 128, model::CompressedRowKind::kIndexer, 9},
                        {128, 512, model::CompressedRowKind::kAttention, 129}};
  const model::RopeParams rope = model::rope_params_yarn(160000.0f, 16.0f, 65536, 32.0f, 1.0f, 64);
  const int n_pair = static_cast<int>(rope.n_rot / 2);  // the table's cos / sin halves per position
  for (const Case& c : cases) {
    SCOPED_TRACE("ratio " + std::to_string(c.ratio) + " d " + std::to_string(c.d));
    model::Compressor cpu(model::CompressorParams{c.ratio, c.d, c.kind, rope, model::kRmsEps});
    const size_t width = cpu.width(), rows_n = cpu.state_rows(), d = c.d;
    std::vector<float> ape(c.ratio * width), norm(d), table(static_cast<size_t>(c.steps) * 2 * n_pair);
    for (float& v : ape) v = 0.25f * nd(rng);
    for (float& v : norm) v = ud(rng);
    for (int p = 0; p < c.steps; ++p)
      model::rope_angles(rope, static_cast<uint32_t>(p), {&table[p * 2 * n_pair], static_cast<size_t>(n_pair)},
                         {&table[p * 2 * n_pair + n_pair], static_cast<size_t>(n_pair)});
    const std::vector<float> kv0(rows_n * width, 0.0f), sc0(rows_n * width, -1.0e30f);
    const size_t n_out = static_cast<size_t>(c.steps) / c.ratio;
    cuda::DeviceArray<float> dape(ape.size()), dnorm(d), dtable(table.size()), dkv(width), dsc(width);
    cuda::DeviceArray<float> skv(kv0.size()), ssc(sc0.size()), row(d), rows(std::max<size_t>(n_out, 1) * d);
    dape.upload(ape.data(), ape.size());
    dnorm.upload(norm.data(), d);
    dtable.upload(table.data(), table.size());
    skv.upload(kv0.data(), kv0.size());
    ssc.upload(sc0.data(), sc0.size());
    cuda::DeviceArray<int64_t> dpos(1);
    std::vector<float> kv(width), sc(width), want(d);
    std::vector<std::vector<float>> emitted;
    for (int p = 0; p < c.steps; ++p) {
      for (float& v : kv) v = nd(rng);
      for (float& v : sc) v = nd(rng);
      sc[3] = 0.5f;  // column 3: equal raw scores in every row (in both halves where ratio 4 overlaps)
      if (width > d) sc[d + 3] = 0.5f;
      dkv.upload(kv.data(), width);
      dsc.upload(sc.data(), width);
      const int64_t pos = p;
      dpos.upload(&pos, 1);
      cuda::compressor_push(dkv.get(), dsc.get(), dape.get(), c.ratio, c.d, dpos.get(), skv.get(), ssc.get(),
                            dnorm.get(), model::kRmsEps, dtable.get(), n_pair,
                            c.kind == model::CompressedRowKind::kIndexer, c.d - rope.n_rot, row.get(), rows.get());
      cuda::check(cudaDeviceSynchronize(), "compressor_push");
      model::compressor_add_ape(sc, ape, c.ratio, static_cast<uint32_t>(p));
      if (cpu.push(kv, sc, static_cast<uint32_t>(p), norm, want)) {
        for (float& v : want) v = round_f16(v);
        emitted.push_back(want);
      }
      ASSERT_EQ(download(skv, kv0.size()), std::vector<float>(cpu.state_kv().begin(), cpu.state_kv().end())) << p;
      ASSERT_EQ(download(ssc, sc0.size()), std::vector<float>(cpu.state_score().begin(), cpu.state_score().end()))
          << p;
    }
    ASSERT_EQ(emitted.size(), n_out);
    const std::vector<float> got = download(rows, n_out * d);
    for (size_t e = 0; e < n_out; ++e)
      EXPECT_EQ(std::vector<float>(got.begin() + e * d, got.begin() + (e + 1) * d), emitted[e]) << "row " << e;
  }
}

// indexer_rope_qat (one launch) equals rope_tail then indexer_qat (two), bit for bit, and the CPU
// units' rope_tail_apply then indexer_qat_row: 3 tokens of 64 heads of 128 at positions 0, 5, 9,
// a 32-pair tail; and 2 tokens of 4 heads with no RoPE pairs.
TEST_F(CudaKernels, IndexerRopeQatEqualsRopeThenQat) {
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  struct Case {
    int n_tok, n_head, n_pair;
  };
  for (const Case c : {Case{3, 64, 32}, Case{2, 4, 0}}) {
    const int64_t dim = 128;
    const std::vector<int64_t> pos = {0, 5, 9};
    const size_t n = static_cast<size_t>(c.n_tok * c.n_head * dim);
    std::vector<float> x(n), table(static_cast<size_t>(10 * 2 * std::max(c.n_pair, 1)));
    for (float& v : x) v = nd(rng);
    for (float& v : table) v = ud(rng);
    cuda::DeviceArray<float> a(n), b(n), dt(table.size());
    cuda::DeviceArray<int64_t> dp(pos.size());
    a.upload(x.data(), n);
    b.upload(x.data(), n);
    dt.upload(table.data(), table.size());
    dp.upload(pos.data(), pos.size());
    cuda::indexer_rope_qat(a.get(), c.n_head, dim, dt.get(), c.n_pair, dp.get(), c.n_tok);
    cuda::rope_tail(b.get(), c.n_head, dim, dt.get(), c.n_pair, dp.get(), false, c.n_tok);
    cuda::indexer_qat(b.get(), c.n_tok * c.n_head, dim);
    cuda::check(cudaDeviceSynchronize(), "indexer rope + qat");
    const std::vector<float> fused = download(a, n), sep = download(b, n);
    EXPECT_EQ(std::memcmp(fused.data(), sep.data(), n * sizeof(float)), 0) << "heads " << c.n_head;
    for (int t = 0; t < c.n_tok; ++t) {
      const std::span<float> tok(&x[static_cast<size_t>(t * c.n_head * dim)], static_cast<size_t>(c.n_head * dim));
      if (c.n_pair > 0) {
        const float* cs = &table[static_cast<size_t>(pos[static_cast<size_t>(t)] * 2 * c.n_pair)];
        model::rope_tail_apply(tok, static_cast<size_t>(dim), {cs, static_cast<size_t>(c.n_pair)},
                               {cs + c.n_pair, static_cast<size_t>(c.n_pair)}, false);
      }
      for (int h = 0; h < c.n_head; ++h) model::indexer_qat_row(tok.subspan(static_cast<size_t>(h * dim), dim));
    }
    EXPECT_EQ(fused, x) << "heads " << c.n_head;
  }
}

// rows x cols HC projection weights of `type` (F32, F16 or BF16 rows, packed), each 0.05 x a draw
// of nd: the matrices both HC projection tests feed the kernels and model::hc_projection.
std::vector<uint8_t> random_hc_rows(GgmlType type, int64_t rows, int64_t cols, std::normal_distribution<float>& nd,
                                    std::mt19937& rng) {
  std::vector<uint8_t> w(static_cast<size_t>(rows * cols) * (type == GgmlType::F32 ? 4 : 2));
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float v = 0.05f * nd(rng);
    if (type == GgmlType::F32) reinterpret_cast<float*>(w.data())[i] = v;
    else if (type == GgmlType::F16) reinterpret_cast<uint16_t*>(w.data())[i] = f32_to_f16(v);
    else reinterpret_cast<uint16_t*>(w.data())[i] = f32_to_bf16(v);
  }
  return w;
}

// The HC norm + projection (one launch) against model::hc_norm_projection, bit for bit (its 64
// chains and tree, then the scale), for F16, F32 and BF16 rows; then with the hc_pre tail in the
// block of the pre rows. Rows whose block needs more shared memory than the device gives (x and
// one row: F32 rows of 16384 under the 99 KiB of DS4_CUDA_SMEM_LIMIT=101376; with the tail x
// and n_hc rows: F32 rows of 16384 anywhere) are declined, not launched.
TEST_F(CudaKernels, HcNormMatvecEqualsNormThenProjection) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t rows = 24, cols = 16384;
  std::vector<float> x(static_cast<size_t>(cols));
  for (float& v : x) v = 3.0f * nd(rng);
  for (const GgmlType type : {GgmlType::F16, GgmlType::F32, GgmlType::BF16}) {
    const size_t rb = static_cast<size_t>(cols) * (type == GgmlType::F32 ? 4 : 2);
    const std::vector<uint8_t> w = random_hc_rows(type, rows, cols, nd, rng);
    std::vector<float> want(static_cast<size_t>(rows));
    model::hc_norm_projection(type, w.data(), rb, rows, x, model::kRmsEps, want);
    cuda::DeviceArray<uint8_t> dw(w.size());
    dw.upload(w.data(), w.size());
    cuda::DeviceArray<float> dx(x.size()), dy(static_cast<size_t>(rows));
    dx.upload(x.data(), x.size());
    const bool fits = static_cast<size_t>(cols) * 4 + rb <= cuda::smem_limit();
    ASSERT_EQ(fits, cuda::hc_norm_matvec(static_cast<uint32_t>(type), dw.get(), rb, rows, cols, dx.get(),
                                         model::kRmsEps, dy.get()))
        << "type " << static_cast<int>(type);
    if (!fits) continue;
    cuda::check(cudaDeviceSynchronize(), "hc_norm_matvec");
    std::vector<float> got(static_cast<size_t>(rows));
    dy.download(got.data(), got.size());
    EXPECT_EQ(got, want) << "type " << static_cast<int>(type);

    // With hc_pre_weights in the block of the 4 pre rows (x as 4 streams of 4096, the decode
    // step's shape): the same mix, and the same pre / sub_in / h / quantized rows as a separate
    // launch on that mix, twice in a row.
    const int nh = 4;
    const int64_t d = cols / nh;
    std::vector<float> nw(static_cast<size_t>(d)), base(static_cast<size_t>(rows), 0.1f);
    for (float& v : nw) v = 1.0f + 0.1f * nd(rng);
    const float scale = 0.5f;
    cuda::DeviceArray<float> dsc(1), dbase(base.size()), dnw(nw.size());
    dsc.upload(&scale, 1);
    dbase.upload(base.data(), base.size());
    dnw.upload(nw.data(), nw.size());
    const size_t a0 = quant::act_row_bytes(quant::ActType::Q8_0, d), ak = quant::act_row_bytes(quant::ActType::Q8_K, d);
    struct Outs {
      cuda::DeviceArray<float> mix, pre, sub, h;
      cuda::DeviceArray<uint8_t> q0, qk;
    };
    auto outs = [&] {
      return Outs{cuda::DeviceArray<float>(static_cast<size_t>(rows)), cuda::DeviceArray<float>(nh),
                  cuda::DeviceArray<float>(static_cast<size_t>(d)), cuda::DeviceArray<float>(static_cast<size_t>(d)),
                  cuda::DeviceArray<uint8_t>(a0), cuda::DeviceArray<uint8_t>(ak)};
    };
    Outs sep = outs(), fused = outs();
    ASSERT_TRUE(cuda::hc_norm_matvec(static_cast<uint32_t>(type), dw.get(), rb, rows, cols, dx.get(), model::kRmsEps,
                                     sep.mix.get()));
    cuda::hc_pre_weights(sep.mix.get(), cuda::hc_pre_args(dsc.get(), dbase.get(), nh, 1e-6f, dx.get(), d, sep.pre.get(),
                                                          sep.sub.get(), dnw.get(), model::kRmsEps, sep.h.get(),
                                                          sep.q0.get(), sep.qk.get()));
    const cuda::HcPreArgs tail = cuda::hc_pre_args(dsc.get(), dbase.get(), nh, 1e-6f, dx.get(), d, fused.pre.get(),
                                                   fused.sub.get(), dnw.get(), model::kRmsEps, fused.h.get(),
                                                   fused.q0.get(), fused.qk.get());
    const bool tail_fits = static_cast<size_t>(cols) * 4 + nh * rb <= cuda::smem_limit();
    for (int rep = 0; rep < 2; ++rep) {
      SCOPED_TRACE("fused launch " + std::to_string(rep));
      for (auto* a : {&fused.mix, &fused.pre, &fused.sub, &fused.h})
        cuda::check(cudaMemset(a->get(), 0xff, a->size() * sizeof(float)), "memset");
      ASSERT_EQ(tail_fits, cuda::hc_norm_matvec(static_cast<uint32_t>(type), dw.get(), rb, rows, cols, dx.get(),
                                                model::kRmsEps, fused.mix.get(), &tail))
          << "type " << static_cast<int>(type);
      if (!tail_fits) break;
      cuda::check(cudaDeviceSynchronize(), "hc_norm_matvec with hc_pre tail");
      EXPECT_EQ(download(fused.mix, static_cast<size_t>(rows)), want);
      EXPECT_EQ(download(fused.pre, nh), download(sep.pre, nh));
      EXPECT_EQ(download(fused.sub, static_cast<size_t>(d)), download(sep.sub, static_cast<size_t>(d)));
      EXPECT_EQ(download(fused.h, static_cast<size_t>(d)), download(sep.h, static_cast<size_t>(d)));
      EXPECT_EQ(download(fused.q0, a0), download(sep.q0, a0));
      EXPECT_EQ(download(fused.qk, ak), download(sep.qk, ak));
    }
  }
  // Types it does not handle are declined, not computed.
  EXPECT_FALSE(cuda::hc_norm_matvec(static_cast<uint32_t>(GgmlType::Q8_0), nullptr, 34, 1, 32, nullptr, 1e-6f, nullptr));
  EXPECT_FALSE(cuda::hc_norm_matvec_batch(static_cast<uint32_t>(GgmlType::Q8_0), nullptr, 34, 1, 32, nullptr, 1e-6f,
                                          nullptr, nullptr, 2));
}

// The batched form (a prefill chunk's tokens, several per block) against the same CPU reference
// per token: 11 tokens (a full block of 8 and a partial one); 24 rows (one group of 24 warps), 7 rows
// and 40 rows (two groups of 20); 4096 columns (whole tiles) and 1104 (a partial last tile, not a
// multiple of the 64 chains); each weight type.
TEST_F(CudaKernels, HcNormMatvecBatchEqualsPerTokenReference) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int n_tok = 11;
  for (const int64_t cols : {int64_t{4096}, int64_t{1104}}) {
    std::vector<float> x(static_cast<size_t>(cols) * n_tok);
    for (size_t i = 0; i < x.size(); ++i) x[i] = (1.0f + static_cast<float>(i / cols)) * nd(rng);
    for (const int64_t rows : {int64_t{24}, int64_t{7}, int64_t{40}}) {
      for (const GgmlType type : {GgmlType::F16, GgmlType::F32, GgmlType::BF16}) {
        SCOPED_TRACE(std::to_string(cols) + " cols, " + std::to_string(rows) + " rows, type " +
                     std::to_string(static_cast<int>(type)));
        const size_t rb = static_cast<size_t>(cols) * (type == GgmlType::F32 ? 4 : 2);
        const std::vector<uint8_t> w = random_hc_rows(type, rows, cols, nd, rng);
        std::vector<float> want(static_cast<size_t>(rows) * n_tok);
        for (int t = 0; t < n_tok; ++t) {
          model::hc_norm_projection(type, w.data(), rb, static_cast<size_t>(rows),
                                    {&x[static_cast<size_t>(t * cols)], static_cast<size_t>(cols)}, model::kRmsEps,
                                    {&want[static_cast<size_t>(t * rows)], static_cast<size_t>(rows)});
        }
        cuda::DeviceArray<uint8_t> dw(w.size());
        dw.upload(w.data(), w.size());
        cuda::DeviceArray<float> dx(x.size()), dy(want.size()), ds(static_cast<size_t>(n_tok));
        dx.upload(x.data(), x.size());
        ASSERT_TRUE(cuda::hc_norm_matvec_batch(static_cast<uint32_t>(type), dw.get(), rb, rows, cols, dx.get(),
                                               model::kRmsEps, ds.get(), dy.get(), n_tok));
        cuda::check(cudaDeviceSynchronize(), "hc_norm_matvec_batch");
        std::vector<float> got(want.size());
        dy.download(got.data(), got.size());
        EXPECT_EQ(got, want);
      }
    }
  }
}

// The grouped matvec against quant::matvec (the CPU reference, bit for bit) for every weight
// type, through each path of the kernel: short rows several per warp, long rows streamed in
// chunks with the activation resident in shared memory, activations too large to stay resident
// (the chunked kernel), rows whose size is not a multiple of 16 bytes, expert groups selected by
// ids (a negative id gives zeros) and a paired launch sharing one quantized input.
// A prefetch writes nothing and skips the ids outside [0, id_limit) (other ranks' experts, -1):
// the prefetched bytes read back unchanged, and no launch error follows ranges with unaligned
// ends, ranges shorter than 16 bytes, and ids that would point past the buffer.
TEST_F(CudaKernels, L2PrefetchWritesNothingAndSkipsInvalidIds) {
  if (!cuda::l2_prefetch_supported()) GTEST_SKIP() << "no bulk prefetch on this device";
  const size_t n = 3 * 1024 * 1024 + 5;
  std::vector<uint8_t> bytes(n);
  std::mt19937 rng(5);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  cuda::DeviceArray<uint8_t> buf(n);
  buf.upload(bytes.data(), n);
  const int32_t ids_host[6] = {2, -1, 0, 7, 1, 1000};  // 7 and 1000: past id_limit 3
  cuda::DeviceArray<int32_t> ids(6);
  ids.upload(ids_host, 6);
  cuda::L2Prefetch p;
  p.r[p.n++] = {buf.get(), n, 0, nullptr, 1, 0};  // the whole buffer, odd length
  p.r[p.n++] = {buf.get() + 3, 10, 0, nullptr, 1, 0};  // no aligned 16 bytes inside
  p.r[p.n++] = {buf.get() + 1, n / 3 - 1, n / 3, ids.get(), 6, 3};  // "experts" of n / 3 bytes
  cuda::l2_prefetch(p);
  cuda::check(cudaDeviceSynchronize(), "l2_prefetch");
  cuda::check(cudaGetLastError(), "l2_prefetch");
  EXPECT_EQ(download(buf, n), bytes);
  cuda::L2Prefetch too_many;
  too_many.n = cuda::kL2MaxRanges + 1;
  EXPECT_THROW(cuda::l2_prefetch(too_many), Error);
}

// The device row layout (weight_layout.cuh): Q8_0 and IQ2_XXS rows become payloads then scales,
// built here from the GGUF block fields; other types are untouched; rows that are not whole
// blocks are an error.
TEST_F(CudaKernels, DeviceLayoutSplitsRowsIntoPayloadsThenScales) {
  struct Case { GgmlType type; int64_t cols; size_t block, payload; };
  for (const Case c : {Case{GgmlType::Q8_0, 96, 34, 32}, Case{GgmlType::IQ2_XXS, 512, 66, 64},
                       Case{GgmlType::Q4_K, 256, 144, 144}}) {
    SCOPED_TRACE(static_cast<int>(c.type));
    const int64_t rows = 5;
    const size_t rb = quant::row_bytes(c.type, c.cols), nb = rb / c.block;
    std::vector<uint8_t> w(rb * rows);
    std::mt19937 rng(3);
    for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
    cuda::DeviceArray<uint8_t> dw(w.size());
    dw.upload(w.data(), w.size());
    cuda::to_device_layout(cuda::DevMatrix{static_cast<uint32_t>(c.type), dw.get(), c.cols, rows, rb});
    std::vector<uint8_t> got(w.size());
    dw.download(got.data(), got.size());
    std::vector<uint8_t> want = w;
    if (c.payload != c.block) {  // split: each block is a 2-byte scale, then the payload
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* src = &w[r * rb];
        uint8_t* dst = &want[r * rb];
        for (size_t j = 0; j < nb; ++j) {
          std::memcpy(dst + j * c.payload, src + j * c.block + 2, c.payload);
          std::memcpy(dst + nb * c.payload + 2 * j, src + j * c.block, 2);
        }
      }
    }
    EXPECT_EQ(got, want);
  }
  cuda::DeviceArray<uint8_t> dw(64);
  EXPECT_THROW(cuda::to_device_layout(cuda::DevMatrix{static_cast<uint32_t>(GgmlType::Q8_0), dw.get(), 48, 1, 51}),
               Error);
}

TEST_F(CudaKernels, MatvecMatchesCpuForEveryTypeAndPath) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,  GgmlType::Q8_0,
                            GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q4_K, GgmlType::IQ2_XXS};
  struct Shape { int64_t rows, cols; };
  for (const GgmlType type : types) {
    const int64_t blk = ggml_type_info(static_cast<uint32_t>(type))->block_elems;
    std::vector<Shape> shapes = {{37, 256}, {70, 4096}, {9, 16384}};
    if (blk == 32 || blk == 1) shapes.push_back({45, 96});  // 96-value rows: not 16-byte multiples
    if (blk == 256) shapes.push_back({11, 7168});  // Pro's 28 blocks: not a multiple of a row's 8 lanes
    // Q8_0 launches of >= 24 MiB take the 2-lanes-per-block dot (grouped and as a pair).
    if (type == GgmlType::Q8_0) shapes.push_back({3072, 4096});
    for (const Shape sh : shapes) {
      SCOPED_TRACE(std::string(ggml_type_info(static_cast<uint32_t>(type))->name) + " cols " +
                   std::to_string(sh.cols));
      const int groups = 3;  // 4 experts of sh.rows rows each; groups read experts 2, none, 0
      const int64_t experts = 4;
      const size_t rb = quant::row_bytes(type, sh.cols);
      std::vector<uint8_t> w(rb * static_cast<size_t>(sh.rows * experts));
      std::vector<float> row(static_cast<size_t>(sh.cols));
      for (int64_t r = 0; r < sh.rows * experts; ++r) {
        for (float& v : row) v = 0.05f * nd(rng);
        quant::quantize_row(type, row.data(), &w[static_cast<size_t>(r) * rb], sh.cols);
      }
      std::vector<float> x(static_cast<size_t>(sh.cols * groups));
      for (float& v : x) v = 2.0f * nd(rng);
      const std::vector<int32_t> ids = {2, -1, 0};
      std::vector<float> want(static_cast<size_t>(sh.rows * groups), 0.0f);
      for (int g = 0; g < groups; ++g)
        if (ids[g] >= 0)
          quant::matvec(type, &w[static_cast<size_t>(ids[g] * sh.rows) * rb], sh.rows, sh.cols,
                        &x[static_cast<size_t>(g * sh.cols)], &want[static_cast<size_t>(g * sh.rows)]);

      cuda::DeviceArray<uint8_t> dw(w.size());
      dw.upload(w.data(), w.size());
      const cuda::DevMatrix m{static_cast<uint32_t>(type), dw.get(), sh.cols, sh.rows * experts, rb};
      cuda::to_device_layout(m);  // the kernels' row layout, as DeviceWeights uploads it
      cuda::DeviceArray<float> dx(x.size()), dy(want.size()), dy2(static_cast<size_t>(sh.rows));
      dx.upload(x.data(), x.size());
      cuda::DeviceArray<int32_t> dids(ids.size());
      dids.upload(ids.data(), ids.size());
      const size_t ab = cuda::act_row_bytes(static_cast<uint32_t>(type), sh.cols);
      cuda::DeviceArray<uint8_t> act(ab * groups + 16), act2(ab + 16);
      // Per-group inputs, experts picked by ids.
      cuda::matvec(m, 0, sh.rows, sh.rows, dids.get(), groups, dx.get(), sh.cols, dy.get(), sh.rows, act.get());
      cuda::check(cudaDeviceSynchronize(), "matvec");
      std::vector<float> got(want.size());
      dy.download(got.data(), got.size());
      EXPECT_EQ(got, want);
      // A pair sharing group 0's input: expert 2's rows and expert 0's first rows - 5.
      const int64_t short_rows = sh.rows - 5;
      cuda::MatvecOp a{&m, 2 * sh.rows, sh.rows, 0, nullptr, 1, dx.get(), 0, dy.get(), 0, act.get(), false};
      cuda::MatvecOp b{&m, 0, short_rows, 0, nullptr, 1, dx.get(), 0, dy2.get(), 0, act2.get(), false};
      cuda::matvec_pair(a, b);
      cuda::check(cudaDeviceSynchronize(), "matvec_pair");
      std::vector<float> pa(static_cast<size_t>(sh.rows)), pb(static_cast<size_t>(short_rows));
      dy.download(pa.data(), pa.size());
      dy2.download(pb.data(), pb.size());
      std::vector<float> want_b(static_cast<size_t>(short_rows));
      quant::matvec(type, w.data(), short_rows, sh.cols, x.data(), want_b.data());
      EXPECT_EQ(pa, std::vector<float>(want.begin(), want.begin() + sh.rows));
      EXPECT_EQ(pb, want_b);
      // A pair with one input quantized beforehand (group 0's, act_ready) and one f32 (group 2's),
      // quantized for the launch into its own buffer (float weights read x itself: not here).
      if (cuda::act_format(static_cast<uint32_t>(type)) == cuda::ActFormat::F32) continue;
      cuda::quantize_rows(static_cast<uint32_t>(type), dx.get(), 0, sh.cols, 1, act.get());
      a.x = nullptr;
      a.act_ready = true;
      b.x = dx.get() + 2 * sh.cols;
      cuda::matvec_pair(a, b);
      cuda::check(cudaDeviceSynchronize(), "matvec_pair, one input ready");
      dy.download(pa.data(), pa.size());
      dy2.download(pb.data(), pb.size());
      quant::matvec(type, w.data(), short_rows, sh.cols, &x[static_cast<size_t>(2 * sh.cols)], want_b.data());
      EXPECT_EQ(pa, std::vector<float>(want.begin(), want.begin() + sh.rows));
      EXPECT_EQ(pb, want_b);
    }
  }
}

// A matvec with hc_post in its epilogue (MatvecOp::post): y and the n_hc new streams equal
// quant::matvec then model::hc_post, bit for bit, through every decode matvec kernel that takes it
// (streaming with one and several rows per warp and the wide Q8_0 dot, chunked; the K-quants,
// whose row-slice kernel does not take it, stream) and through the fallback launch (row0 != 0).
TEST_F(CudaKernels, MatvecHcPostEpilogueEqualsMatvecThenHcPost) {
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct Case { GgmlType type; int64_t rows, cols, row0; };
  const Case cases[] = {
      {GgmlType::Q8_0, 4096, 8192, 0},   // streaming, the 2-lanes-per-block dot (o_b's shape, >= 24 MiB)
      {GgmlType::Q8_0, 300, 256, 0},     // streaming, 4 rows per warp
      {GgmlType::Q8_0, 200, 16384, 0},   // chunked (the activation does not stay resident)
      {GgmlType::F32, 77, 8192, 0},      // chunked, float
      {GgmlType::F32, 50, 96, 0},        // streaming, float, several rows per warp
      {GgmlType::Q2_K, 1000, 4096, 0},   // streaming instead of the row-slice kernel
      {GgmlType::IQ2_XXS, 1000, 4096, 0},  // streaming instead of the row-slice kernel
      {GgmlType::Q8_0, 300, 256, 7},     // rows from 7 on: hc_post in a launch of its own
  };
  const int nh = 4;
  for (const Case& cs : cases) {
    SCOPED_TRACE(std::string(ggml_type_info(static_cast<uint32_t>(cs.type))->name) + " " + std::to_string(cs.rows) +
                 " x " + std::to_string(cs.cols) + " from row " + std::to_string(cs.row0));
    const int64_t d = cs.rows, all_rows = cs.rows + cs.row0;
    const size_t rb = quant::row_bytes(cs.type, cs.cols);
    std::vector<uint8_t> w(rb * static_cast<size_t>(all_rows));
    std::vector<float> row(static_cast<size_t>(cs.cols));
    for (int64_t r = 0; r < all_rows; ++r) {
      for (float& v : row) v = 0.05f * nd(rng);
      quant::quantize_row(cs.type, row.data(), &w[static_cast<size_t>(r) * rb], cs.cols);
    }
    std::vector<float> x(static_cast<size_t>(cs.cols)), state(static_cast<size_t>(nh * d)), post(nh),
        comb(static_cast<size_t>(nh * nh));
    for (float& v : x) v = 2.0f * nd(rng);
    for (float& v : state) v = nd(rng);
    for (float& v : post) v = 0.5f + 0.25f * nd(rng);
    for (float& v : comb) v = 0.25f + 0.1f * nd(rng);
    std::vector<float> want_y(static_cast<size_t>(d)), want_out(state.size());
    quant::matvec(cs.type, &w[static_cast<size_t>(cs.row0) * rb], d, cs.cols, x.data(), want_y.data());
    model::hc_post(want_y, state, post, comb, want_out);

    cuda::DeviceArray<uint8_t> dw(w.size());
    dw.upload(w.data(), w.size());
    const cuda::DevMatrix m{static_cast<uint32_t>(cs.type), dw.get(), cs.cols, all_rows, rb};
    cuda::to_device_layout(m);
    cuda::DeviceArray<float> dx(x.size()), dy(want_y.size()), dstate(state.size()), dpost(post.size()),
        dcomb(comb.size()), dout(state.size());
    dx.upload(x.data(), x.size());
    dstate.upload(state.data(), state.size());
    dpost.upload(post.data(), post.size());
    dcomb.upload(comb.data(), comb.size());
    cuda::DeviceArray<uint8_t> act(cuda::act_row_bytes(static_cast<uint32_t>(cs.type), cs.cols) + 16);
    const cuda::HcPostEpi epi{dstate.get(), dpost.get(), dcomb.get(), nh, d, dout.get()};
    cuda::MatvecOp o{&m, cs.row0, d, 0, nullptr, 1, dx.get(), 0, dy.get(), 0, act.get(), false};
    o.post = &epi;
    cuda::matvec_op(o);
    cuda::check(cudaDeviceSynchronize(), "matvec with hc_post");
    EXPECT_EQ(download(dy, want_y.size()), want_y);
    EXPECT_EQ(download(dout, want_out.size()), want_out);
  }
}

// Kernels that quantize their own output for the next matvec: the fused q_a norm (Q8_0), the HC
// pre kernel's h (Q8_0 and Q8_K), and SwiGLU straight into the down projection's activation
// format: the same bytes as quant::quantize_activation of the f32 values, and the same matvec
// results as model::expert_swiglu then quant::matvec.
TEST_F(CudaKernels, FusedActivationQuantizationMatchesCpu) {
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto cpu_act = [](quant::ActType t, const std::vector<float>& v) {
    std::vector<uint8_t> out(quant::act_row_bytes(t, static_cast<int64_t>(v.size())));
    quant::quantize_activation(t, v.data(), out.data(), static_cast<int64_t>(v.size()));
    return out;
  };
  // rms_norm with a Q8_0 output, 2 rows in place: 1024 values (quantized from registers) and
  // 8192 (past the register form: written, then read back).
  for (const int64_t dim : {int64_t{1024}, int64_t{8192}}) {
    SCOPED_TRACE("rms_norm of " + std::to_string(dim));
    std::vector<float> x(2 * dim), w(dim), want(2 * dim);
    for (float& v : x) v = 2.0f * nd(rng);
    for (float& v : w) v = 1.0f + 0.1f * nd(rng);
    for (int r = 0; r < 2; ++r)
      model::rms_norm(std::span<const float>(&x[r * dim], dim), w, std::span<float>(&want[r * dim], dim));
    cuda::DeviceArray<float> dx(x.size()), dw(w.size());
    dx.upload(x.data(), x.size());
    dw.upload(w.data(), w.size());
    const size_t ab = quant::act_row_bytes(quant::ActType::Q8_0, dim);
    cuda::DeviceArray<uint8_t> q(2 * ab);
    cuda::rms_norm(dx.get(), dw.get(), dx.get(), dim, 2, model::kRmsEps, q.get());
    cuda::check(cudaDeviceSynchronize(), "rms_norm");
    EXPECT_EQ(download(dx, x.size()), want);
    std::vector<uint8_t> want_q = cpu_act(quant::ActType::Q8_0, std::vector<float>(want.begin(), want.begin() + dim));
    const std::vector<uint8_t> q1 = cpu_act(quant::ActType::Q8_0, std::vector<float>(want.begin() + dim, want.end()));
    want_q.insert(want_q.end(), q1.begin(), q1.end());
    EXPECT_EQ(download(q, 2 * ab), want_q);
  }
  {  // HC pre: h quantized in both formats (n_hc 4, d 4096 and 512)
    for (const int64_t d : {int64_t{4096}, int64_t{512}}) {
      const int nh = 4;
      std::vector<float> mix(24), x(static_cast<size_t>(nh * d)), nw(static_cast<size_t>(d));
      for (float& v : mix) v = nd(rng);
      for (float& v : x) v = nd(rng);
      for (float& v : nw) v = 1.0f + 0.1f * nd(rng);
      const float scale = 0.5f;
      std::vector<float> base(24, 0.1f);
      cuda::DeviceArray<float> dmix(mix.size()), dsc(1), dbase(base.size()), dxx(x.size()), dnw(nw.size()),
          pre(static_cast<size_t>(nh)), sub(static_cast<size_t>(d)), h(static_cast<size_t>(d));
      dmix.upload(mix.data(), mix.size());
      dsc.upload(&scale, 1);
      dbase.upload(base.data(), base.size());
      dxx.upload(x.data(), x.size());
      dnw.upload(nw.data(), nw.size());
      const size_t a0 = quant::act_row_bytes(quant::ActType::Q8_0, d), ak = quant::act_row_bytes(quant::ActType::Q8_K, d);
      cuda::DeviceArray<uint8_t> q0(a0), qk(ak);
      cuda::hc_pre_weights(dmix.get(), cuda::hc_pre_args(dsc.get(), dbase.get(), nh, 1e-6f, dxx.get(), d, pre.get(),
                                                         sub.get(), dnw.get(), model::kRmsEps, h.get(), q0.get(),
                                                         qk.get()));
      cuda::check(cudaDeviceSynchronize(), "hc_pre_weights");
      const std::vector<float> hv = download(h, static_cast<size_t>(d));
      EXPECT_EQ(download(q0, a0), cpu_act(quant::ActType::Q8_0, hv)) << d;
      EXPECT_EQ(download(qk, ak), cpu_act(quant::ActType::Q8_K, hv)) << d;
    }
  }
  // SwiGLU into the down projection: 3 groups of 512 hidden values, experts {1, 3, 0} of 4; and
  // (the decode step's shape class: the row-slice launch reading its ids before its PDL wait,
  // 8 Q8_K blocks per group, several blocks per group) 4 groups of 2048, experts {2, 0, -1, 3}
  // (-1: an expert this device does not hold, zeros), group 0's first 256 values zero; and the
  // shared expert's form: one group of 2048 without ids or gate weights (empty ids).
  struct Shape { int64_t n, rows; std::vector<int32_t> ids; };
  const Shape shapes[] = {{512, 40, {1, 3, 0}}, {2048, 600, {2, 0, -1, 3}}, {2048, 300, {}}};
  for (const Shape& sh : shapes)
  for (const GgmlType type : {GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q4_K, GgmlType::IQ2_XXS, GgmlType::F16}) {
    SCOPED_TRACE(std::string(ggml_type_info(static_cast<uint32_t>(type))->name) + " n " + std::to_string(sh.n));
    const int64_t n = sh.n, rows = sh.rows, experts = 4;
    const bool shared = sh.ids.empty();
    const int groups = shared ? 1 : static_cast<int>(sh.ids.size());
    const size_t rb = quant::row_bytes(type, n);
    std::vector<uint8_t> w(rb * rows * experts);
    std::vector<float> row(n);
    for (int64_t r = 0; r < rows * experts; ++r) {
      for (float& v : row) v = 0.05f * nd(rng);
      quant::quantize_row(type, row.data(), &w[static_cast<size_t>(r) * rb], n);
    }
    std::vector<float> gate(groups * n), up(groups * n), gw = {0.7f, 1.3f, 0.25f, 0.9f};
    for (float& v : gate) v = 3.0f * nd(rng);
    for (float& v : up) v = 3.0f * nd(rng);
    if (n >= 2048) std::fill_n(gate.begin(), 256, 0.0f);
    const std::vector<int32_t> ids = shared ? std::vector<int32_t>{0} : sh.ids;
    const float clamp = 4.0f;
    std::vector<float> want(groups * rows, 0.0f), mid(n);
    for (int g = 0; g < groups; ++g) {
      if (ids[g] < 0) continue;
      model::expert_swiglu(std::span<const float>(&gate[g * n], n), std::span<const float>(&up[g * n], n), clamp,
                           shared ? 1.0f : gw[g], mid);
      quant::matvec(type, &w[static_cast<size_t>(ids[g] * rows) * rb], rows, n, mid.data(), &want[g * rows]);
    }
    cuda::DeviceArray<uint8_t> dw(w.size());
    dw.upload(w.data(), w.size());
    const cuda::DevMatrix m{static_cast<uint32_t>(type), dw.get(), n, rows * experts, rb};
    cuda::to_device_layout(m);  // the kernels' row layout, as DeviceWeights uploads it
    cuda::DeviceArray<float> dg(gate.size()), du(up.size()), dgw(gw.size()), dy(want.size()), dmid(gate.size());
    dg.upload(gate.data(), gate.size());
    du.upload(up.data(), up.size());
    dgw.upload(gw.data(), gw.size());
    cuda::DeviceArray<int32_t> dids(ids.size());
    dids.upload(ids.data(), ids.size());
    cuda::DeviceArray<uint8_t> act(cuda::act_row_bytes(static_cast<uint32_t>(type), n) * groups + 16);
    cuda::MatvecOp op{&m, 0, rows, rows, shared ? nullptr : dids.get(), groups, nullptr, 0, dy.get(), rows, act.get(),
                      false};
    cuda::swiglu_matvec(op, dg.get(), du.get(), clamp, shared ? nullptr : dgw.get(), dmid.get());
    cuda::check(cudaDeviceSynchronize(), "swiglu_matvec");
    EXPECT_EQ(download(dy, want.size()), want);
  }
}

// The matvec inputs' quantization (cuda::quantize_rows) against quant::quantize_activation, byte
// for byte: Q8_0 (for Q8_0 weights) in whole and partial 8-block warp groups, rows 16-byte
// aligned (vector loads) or not (odd strides), blocks that are all zero, subnormal (the inverse
// scale overflows: a zero block), with one NaN or all NaN (scale 0); Q8_K (for Q2_K weights)
// likewise.
TEST_F(CudaKernels, QuantizeRowsMatchesCpu) {
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct Case { GgmlType weight; quant::ActType act; int64_t cols, stride; int rows; };
  const Case cases[] = {{GgmlType::Q8_0, quant::ActType::Q8_0, 4096, 4096, 5},
                        {GgmlType::Q8_0, quant::ActType::Q8_0, 96, 101, 3},
                        {GgmlType::Q8_0, quant::ActType::Q8_0, 800, 804, 4},
                        {GgmlType::Q2_K, quant::ActType::Q8_K, 2048, 2048, 3},
                        {GgmlType::Q2_K, quant::ActType::Q8_K, 512, 517, 2}};
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "cols " << c.cols << " stride " << c.stride);
    std::vector<float> x(static_cast<size_t>(c.stride * c.rows));
    for (float& v : x) v = 3.0f * nd(rng);
    for (int64_t i = 0; i < 32; ++i) {  // row 0: a zero block, a subnormal block, a NaN in a block
      x[static_cast<size_t>(32 + i)] = 0.0f;
      x[static_cast<size_t>(64 + i)] = (i % 2 ? -1.0f : 1.0f) * 1.0e-41f;
    }
    x[5] = std::numeric_limits<float>::quiet_NaN();
    for (int64_t i = 0; i < 32; ++i) x[static_cast<size_t>(c.stride + i)] = std::numeric_limits<float>::quiet_NaN();
    // Row 0's first 256 values: the largest |x| twice, negative first (its sign sets the scale);
    // lane 12's value 3 and lane 25's value 0 of a Q8_K block's warp.
    x[99] = -50.0f;
    x[200] = 50.0f;
    const size_t ab = quant::act_row_bytes(c.act, c.cols);
    std::vector<uint8_t> want(ab * static_cast<size_t>(c.rows));
    for (int r = 0; r < c.rows; ++r) quant::quantize_activation(c.act, &x[static_cast<size_t>(r * c.stride)], &want[r * ab], c.cols);
    cuda::DeviceArray<float> dx(x.size());
    dx.upload(x.data(), x.size());
    ASSERT_EQ(cuda::act_row_bytes(static_cast<uint32_t>(c.weight), c.cols), ab);
    cuda::DeviceArray<uint8_t> q(want.size());
    cuda::quantize_rows(static_cast<uint32_t>(c.weight), dx.get(), c.stride, c.cols, c.rows, q.get());
    cuda::check(cudaDeviceSynchronize(), "quantize_rows");
    std::vector<uint8_t> got(want.size());
    q.download(got.data(), got.size());
    EXPECT_EQ(got, want);
  }
}

// Router selection (spec §3.5) with many exact ties and a NaN logit, with and without bias, against
// router_probs + router_select_top_k + router_weights.
// Both selections: the warp maxima (default) and the rank scan (DS4_CUDA_ROUTER_WARP=0, read at
// every launch; n 384 takes the scan either way).
TEST_F(CudaKernels, RouterSelectionMatchesCpuWithTies) {
  std::mt19937 rng(3);
  const char* prev = std::getenv("DS4_CUDA_ROUTER_WARP");
  const std::string saved = prev ? prev : "";
  for (const char* warp : {"0", "1"}) {
    setenv("DS4_CUDA_ROUTER_WARP", warp, 1);
    SCOPED_TRACE(std::string("DS4_CUDA_ROUTER_WARP=") + warp);
    for (const int n : {16, 256, 384}) {
      for (const bool with_bias : {false, true}) {
        const int k = 6;
        std::vector<float> logits(static_cast<size_t>(n)), bias;
        for (float& v : logits) v = 0.25f * static_cast<float>(rng() % 9) - 1.0f;  // 9 distinct values
        logits[static_cast<size_t>(n / 3)] = std::numeric_limits<float>::quiet_NaN();
        if (with_bias) {
          bias.resize(static_cast<size_t>(n));
          for (float& v : bias) v = 0.125f * static_cast<float>(rng() % 3);
        }
        std::vector<float> p(logits.size());
        model::router_probs(logits, p);
        std::vector<int32_t> want(static_cast<size_t>(k));
        model::router_select_top_k(p, bias, want);
        std::vector<float> want_w(static_cast<size_t>(k));
        model::router_weights(p, want, 1.5f, want_w);
        cuda::DeviceArray<float> dl(logits.size()), db(std::max<size_t>(bias.size(), 1)), dp(logits.size()), dw(k);
        cuda::DeviceArray<int32_t> dsel(k), dord(k), dtok(1);
        cuda::DeviceArray<int64_t> dpos(1);
        dl.upload(logits.data(), logits.size());
        if (with_bias) db.upload(bias.data(), bias.size());
        const int64_t pos = 0;
        dpos.upload(&pos, 1);
        cuda::router(dl.get(), n, with_bias ? db.get() : nullptr, nullptr, dtok.get(), dpos.get(), k, 1.5f, dp.get(),
                     dsel.get(), dw.get(), dord.get());
        cuda::check(cudaDeviceSynchronize(), "router");
        std::vector<int32_t> got(static_cast<size_t>(k)), ord(static_cast<size_t>(k));
        std::vector<float> got_w(static_cast<size_t>(k));
        dsel.download(got.data(), got.size());
        dw.download(got_w.data(), got_w.size());
        dord.download(ord.data(), ord.size());
        EXPECT_EQ(got, want) << "n=" << n << " bias=" << with_bias;
        // Weights: the device's exp/log1p (f64, rounded once) may differ from glibc's by an ulp.
        for (int i = 0; i < k; ++i)
          EXPECT_NEAR(got_w[static_cast<size_t>(i)], want_w[static_cast<size_t>(i)],
                      4e-7f * std::fabs(want_w[static_cast<size_t>(i)]))
              << "n=" << n << " bias=" << with_bias;
        for (int i = 1; i < k; ++i) EXPECT_LT(got[static_cast<size_t>(ord[i - 1])], got[static_cast<size_t>(ord[i])]);
      }
    }
  }
  if (prev) setenv("DS4_CUDA_ROUTER_WARP", saved.c_str(), 1);
  else unsetenv("DS4_CUDA_ROUTER_WARP");
}

// model::sink_attention's operation order (dot_f32 then the scale, max with the sink, the
// denominator and each output value summed in row order, then * 1/denominator) with exp evaluated
// in f64 and rounded once, as the device's exp_f does. glibc's expf, which model::sink_attention
// calls, is within 0.502 ulp and so differs from the correctly rounded value in rare halfway
// cases (a few in 10^4 scores here); everything else must match bit for bit.
void sink_attention_f64_exp(const std::vector<float>& q, const std::vector<float>& sinks,
                            const std::vector<const float*>& rows, std::vector<float>& out) {
  const size_t n_head = sinks.size(), dim = q.size() / n_head;
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(dim));
  const auto exp_f = [](float x) { return static_cast<float>(std::exp(static_cast<double>(x))); };
  std::vector<float> score(rows.size());
  for (size_t h = 0; h < n_head; ++h) {
    float m = sinks[h];
    for (size_t j = 0; j < rows.size(); ++j) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // dot8: 8 interleaved sums, fixed tree, serial tail
      size_t i = 0;
      for (; i + 8 <= dim; i += 8)
        for (size_t l = 0; l < 8; ++l) acc[l] += q[h * dim + i + l] * rows[j][i + l];
      float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
      for (; i < dim; ++i) s += q[h * dim + i] * rows[j][i];
      score[j] = s * kq_scale;
      m = std::max(m, score[j]);
    }
    float* o = &out[h * dim];
    std::fill(o, o + dim, 0.0f);
    float denom = exp_f(sinks[h] - m);
    for (size_t j = 0; j < rows.size(); ++j) {
      const float w = exp_f(score[j] - m);
      denom += w;
      for (size_t i = 0; i < dim; ++i) o[i] += w * rows[j][i];
    }
    for (size_t i = 0; i < dim; ++i) o[i] *= 1.0f / denom;
  }
}

// Sink attention (spec §3.4.8) at one position: the window rows of the ring (wrapped around it
// when pos >= raw_cap) then the compressed rows (ratio 128) or the rows listed in sel (ratio 4),
// bit for bit against model::sink_attention's order with exp rounded as on the device, and
// within 1e-6 of model::sink_attention itself.
struct AttnCase {
  int n_head;
  int64_t dim, n_swa, raw_cap, pos;
  uint32_t ratio;
  int64_t n_sel;  // > 0: attend the n_sel rows of a sorted random selection instead of all
};

TEST_F(CudaKernels, SinkAttentionMatchesCpuBitForBit) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  const AttnCase cases[] = {
      {64, 512, 128, 128, 0, 0, 0},                 // 1 row
      {64, 512, 128, 128, 6, 0, 0},                 // 7 rows
      {5, 100, 129, 129, 1000, 0, 0},               // 129 wrapped rows, dim % 8 = 4, 5 heads
      {64, 512, 128, 128, 127, 128, 0},             // 128 + 1 rows
      {64, 512, 128, 128, 300, 128, 0},             // wrapped window + 2 compressed rows
      {64, 512, 128, 128, 2100, 4, 512},            // wrapped window + 512 selected = 640 rows
      {64, 512, 128, 128, 128 * 1000 + 50, 128, 0}, // 1128 rows: more than one probability chunk
      {12, 36, 16, 20, 77, 4, 9},                   // ring larger than the window, 25 rows
      {3, 7, 8, 8, 30, 4, 3},                       // dim < 8: the whole dot is dot8's tail
      {5, 64, 128, 128, 199, 4, 0},                 // 5 heads of 64 (Q8_0 copy, a head group of 5), 128 + 50 rows
  };
  for (const AttnCase& c : cases) {
    const int64_t n_win = std::min(c.pos + 1, c.n_swa), lo = c.pos + 1 - n_win;
    const int64_t n_comp = c.ratio ? (c.pos + 1) / c.ratio : 0;
    std::vector<float> q(static_cast<size_t>(c.n_head * c.dim)), sinks(static_cast<size_t>(c.n_head));
    std::vector<float> raw(static_cast<size_t>(c.raw_cap * c.dim)), comp(static_cast<size_t>(std::max<int64_t>(n_comp, 1) * c.dim));
    for (float& v : q) v = ud(rng);
    for (float& v : sinks) v = 2.0f * ud(rng);
    for (float& v : raw) v = ud(rng);
    for (float& v : comp) v = ud(rng);
    std::vector<uint32_t> sel;
    if (c.n_sel) {  // n_sel distinct ascending ids out of n_comp
      std::vector<uint32_t> all(static_cast<size_t>(n_comp));
      for (size_t k = 0; k < all.size(); ++k) all[k] = static_cast<uint32_t>(k);
      std::shuffle(all.begin(), all.end(), rng);
      sel.assign(all.begin(), all.begin() + c.n_sel);
      std::sort(sel.begin(), sel.end());
    }
    std::vector<const float*> rows;
    for (int64_t p = lo; p <= c.pos; ++p) rows.push_back(&raw[static_cast<size_t>((p % c.raw_cap) * c.dim)]);
    if (c.n_sel) {
      for (const uint32_t id : sel) rows.push_back(&comp[static_cast<size_t>(id * c.dim)]);
    } else {
      for (int64_t k = 0; k < n_comp; ++k) rows.push_back(&comp[static_cast<size_t>(k * c.dim)]);
    }
    const int64_t n_rows = static_cast<int64_t>(rows.size()), max_rows = n_rows + 40;  // spare row blocks idle
    std::vector<float> cpu(q.size()), scratch(rows.size()), want(q.size());
    model::sink_attention(q, sinks, rows, cpu, scratch);
    sink_attention_f64_exp(q, sinks, rows, want);

    cuda::DeviceArray<float> dq(q.size()), ds(sinks.size()), draw(raw.size()), dcomp(comp.size()), dout(q.size());
    cuda::DeviceArray<float> dscratch(static_cast<size_t>(c.n_head * max_rows));
    cuda::DeviceArray<uint32_t> dsel(std::max<size_t>(sel.size(), 1));
    cuda::DeviceArray<int64_t> dpos(1);
    dq.upload(q.data(), q.size());
    ds.upload(sinks.data(), sinks.size());
    draw.upload(raw.data(), raw.size());
    dcomp.upload(comp.data(), comp.size());
    if (!sel.empty()) dsel.upload(sel.data(), sel.size());
    dpos.upload(&c.pos, 1);
    // With a Q8_0 copy of the outputs (written when dim % 32 == 0: one block per output warp).
    const size_t q8_bytes = quant::act_row_bytes(quant::ActType::Q8_0, static_cast<int64_t>(q.size()) / 32 * 32);
    const std::vector<uint8_t> sentinel(q8_bytes + 36, 0xAB);  // bytes no launch may touch stay 0xAB
    cuda::DeviceArray<uint8_t> dq8(sentinel.size());
    dq8.upload(sentinel.data(), sentinel.size());
    const cuda::SinkAttentionOut plain = cuda::sink_attention(
        dq.get(), ds.get(), c.n_head, c.dim, draw.get(), c.raw_cap, c.n_swa, dpos.get(), dcomp.get(), c.ratio,
        c.n_sel ? dsel.get() : nullptr, c.n_sel, max_rows, dscratch.get(), dout.get(), nullptr, 0, dq8.get());
    cuda::check(cudaDeviceSynchronize(), "sink_attention");
    std::vector<float> got(q.size());
    dout.download(got.data(), got.size());
    EXPECT_FALSE(plain.roped);
    EXPECT_EQ(plain.quantized, c.dim % 32 == 0) << "dim " << c.dim;
    auto q8_of = [](const std::vector<float>& v) {
      std::vector<uint8_t> b(quant::act_row_bytes(quant::ActType::Q8_0, static_cast<int64_t>(v.size())));
      quant::quantize_activation(quant::ActType::Q8_0, v.data(), b.data(), static_cast<int64_t>(v.size()));
      return b;
    };
    auto expect_q8 = [&](const cuda::DeviceArray<uint8_t>& d, bool quantized, const std::vector<float>& v) {
      std::vector<uint8_t> want_q8 = quantized ? q8_of(v) : std::vector<uint8_t>(q8_bytes, 0xAB);
      want_q8.resize(sentinel.size(), 0xAB);
      EXPECT_EQ(download(d, sentinel.size()), want_q8) << "dim " << c.dim << " pos " << c.pos;
    };
    expect_q8(dq8, plain.quantized, got);
    size_t diff = 0;
    double worst = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      if (std::memcmp(&got[k], &want[k], sizeof(float)) != 0) {
        ++diff;
        worst = std::max(worst, std::fabs(static_cast<double>(got[k]) - want[k]) / std::max(1e-30, std::fabs(static_cast<double>(want[k]))));
      }
    }
    EXPECT_EQ(diff, 0u) << "heads " << c.n_head << " dim " << c.dim << " pos " << c.pos << " ratio " << c.ratio
                        << " rows " << n_rows << ": worst relative difference " << worst;
    for (size_t k = 0; k < got.size(); ++k) ASSERT_NEAR(got[k], cpu[k], 1e-6f) << "value " << k;
    // The output is a convex combination of the rows (scaled by the sink's share): |o| <= 1.
    for (const float v : got) ASSERT_LE(std::fabs(v), 1.0f);

    // The inverse tail RoPE in the combine launch (decode): the bits of sink_attention then
    // rope_tail, and model::rope_tail_apply's values; declined (false) for an odd dim.
    if (c.pos >= 4096) continue;  // the angle table is indexed by position
    const int n_pair = static_cast<int>(std::min<int64_t>(c.dim / 2, 32));
    std::vector<float> table(static_cast<size_t>((c.pos + 1) * 2 * n_pair));
    for (float& v : table) v = ud(rng);
    cuda::DeviceArray<float> dtable(table.size()), dfused(q.size());
    dtable.upload(table.data(), table.size());
    cuda::DeviceArray<uint8_t> dq8r(sentinel.size());
    dq8r.upload(sentinel.data(), sentinel.size());
    const cuda::SinkAttentionOut roped = cuda::sink_attention(
        dq.get(), ds.get(), c.n_head, c.dim, draw.get(), c.raw_cap, c.n_swa, dpos.get(), dcomp.get(), c.ratio,
        c.n_sel ? dsel.get() : nullptr, c.n_sel, max_rows, dscratch.get(), dfused.get(), dtable.get(), n_pair, dq8r.get());
    const bool fused = roped.roped;
    EXPECT_EQ(fused, c.dim % 2 == 0) << "dim " << c.dim;
    EXPECT_EQ(roped.quantized, c.dim % 32 == 0) << "dim " << c.dim;  // quantized only after the fused RoPE
    if (!fused) cuda::rope_tail(dfused.get(), c.n_head, c.dim, dtable.get(), n_pair, dpos.get(), true);
    cuda::rope_tail(dout.get(), c.n_head, c.dim, dtable.get(), n_pair, dpos.get(), true);
    cuda::check(cudaDeviceSynchronize(), "sink_attention + inverse rope");
    std::vector<float> sep(q.size()), fus(q.size());
    dout.download(sep.data(), sep.size());
    dfused.download(fus.data(), fus.size());
    EXPECT_EQ(std::memcmp(sep.data(), fus.data(), sep.size() * sizeof(float)), 0) << "dim " << c.dim << " pos " << c.pos;
    expect_q8(dq8r, roped.quantized, fus);
    const float* cs = &table[static_cast<size_t>(c.pos * 2 * n_pair)];
    model::rope_tail_apply(got, static_cast<size_t>(c.dim), {cs, static_cast<size_t>(n_pair)},
                           {cs + n_pair, static_cast<size_t>(n_pair)}, true);
    for (size_t k = 0; k < got.size(); ++k) ASSERT_NEAR(fus[k], got[k], 1e-6f) << "roped value " << k;
  }
}

// A prefill chunk's attention in one launch pair (sink_attention_batch: the chunk's window rows
// read from its own KV rows, older ones from the ring) equals token-by-token sink_attention with
// the ring updated before each token, bit for bit; kv_ring_store then leaves the ring as the
// token-by-token stores did. Cases: ratio-128 rows, ratio-4 rows past one 512-row chunk,
// per-token selected rows (one token per scores block), and a window still filling up inside the
// chunk. Without selection the scores take groups of 4 consecutive tokens over the union of
// their rows (attn_scores_mq_kernel): partial last groups (n % 4 != 0), the compressed row count
// changing inside a group (ratio 4: every group; ratio 128: at 1023 -> 1024), wrapped windows,
// windows of 1.. rows from position 0, one filling up to 128 inside a group, window-only layers,
// and 300 / 520 tokens (75 / 130 groups x 8 head groups: 2 / 4 row tiles of 32 per block).
// Then tokens whose positions are not consecutive (the groups split into runs), rows from the
// ring only.
TEST_F(CudaKernels, BatchedAttentionEqualsPerTokenCalls) {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  struct Case {
    int64_t pos0;
    int n;
    uint32_t ratio;
    int64_t n_sel;
  };
  const Case cases[] = {{1000, 40, 128, 0}, {2040, 24, 4, 0}, {2400, 20, 4, 512}, {5, 30, 4, 0},
                        {1021, 7, 128, 0},  {2042, 23, 4, 0}, {0, 13, 4, 0},      {118, 14, 4, 0},
                        {300, 9, 0, 0},     {127, 2, 4, 0},      {1500, 300, 128, 0}, {600, 520, 4, 0}};
  // The model's 64 heads x 512, then a partial head group and partial output-dim slices.
  const std::pair<int, int64_t> shapes[] = {{64, 512}, {12, 192}};
  const int64_t swa = 128, cap = 128;
  for (const auto& [nh, dim] : shapes) {
    const int64_t qd = nh * dim;
    for (const Case& c : cases) {
      SCOPED_TRACE("pos0 " + std::to_string(c.pos0) + " ratio " + std::to_string(c.ratio) + " heads " +
                   std::to_string(nh) + " dim " + std::to_string(dim));
      const int64_t end = c.pos0 + c.n, n_comp = c.ratio ? end / c.ratio : 0;
      std::vector<float> q(static_cast<size_t>(c.n * qd)), sinks(nh), ring(static_cast<size_t>(cap * dim));
      std::vector<float> chunk(static_cast<size_t>(c.n * dim)), comp(static_cast<size_t>(std::max<int64_t>(n_comp, 1) * dim));
      for (auto* v : {&q, &sinks, &ring, &chunk, &comp})
        for (float& x : *v) x = ud(rng);
      std::vector<int64_t> pos(static_cast<size_t>(c.n));
      for (int t = 0; t < c.n; ++t) pos[t] = c.pos0 + t;
      std::vector<uint32_t> sel(static_cast<size_t>(std::max<int64_t>(c.n * c.n_sel, 1)));
      for (int t = 0; c.n_sel && t < c.n; ++t) {  // token t: n_sel distinct ascending ids of its rows
        std::vector<uint32_t> all(static_cast<size_t>((pos[t] + 1) / c.ratio));
        ASSERT_GE(static_cast<int64_t>(all.size()), c.n_sel);
        for (size_t k = 0; k < all.size(); ++k) all[k] = static_cast<uint32_t>(k);
        std::shuffle(all.begin(), all.end(), rng);
        std::sort(all.begin(), all.begin() + c.n_sel);
        std::copy_n(all.begin(), c.n_sel, sel.begin() + t * c.n_sel);
      }
      const int64_t max_rows = swa + (c.n_sel ? c.n_sel : n_comp + 2);
      cuda::DeviceArray<float> dq(q.size()), ds(sinks.size()), dring(ring.size()), dchunk(chunk.size()), dcomp(comp.size());
      cuda::DeviceArray<float> dout(q.size()), dout1(q.size());
      cuda::DeviceArray<float> dscr(static_cast<size_t>(c.n * cuda::attention_scratch_floats(nh, max_rows)));
      cuda::DeviceArray<float> dring1(ring.size()), dscr1(static_cast<size_t>(nh * max_rows));
      cuda::DeviceArray<int64_t> dpos(pos.size());
      cuda::DeviceArray<uint32_t> dsel(sel.size());
      dq.upload(q.data(), q.size());
      ds.upload(sinks.data(), sinks.size());
      dring.upload(ring.data(), ring.size());
      dchunk.upload(chunk.data(), chunk.size());
      dcomp.upload(comp.data(), comp.size());
      dpos.upload(pos.data(), pos.size());
      dsel.upload(sel.data(), sel.size());
      const uint32_t* psel = c.n_sel ? dsel.get() : nullptr;
      cuda::sink_attention_batch(dq.get(), qd, ds.get(), nh, dim, dring.get(), cap, dchunk.get(), c.pos0, swa, dpos.get(),
                                 dcomp.get(), c.ratio, psel, c.n_sel, c.n_sel, max_rows, dscr.get(), dout.get(), qd, c.n);
      cuda::kv_ring_store(dchunk.get(), dim, dpos.get(), dring.get(), cap, c.n);
      for (int t = 0; t < c.n; ++t) {  // the decode order: store row t, then token t's attention
        std::copy_n(&chunk[static_cast<size_t>(t * dim)], dim, &ring[static_cast<size_t>((pos[t] % cap) * dim)]);
        dring1.upload(ring.data(), ring.size());
        cuda::sink_attention(dq.get() + t * qd, ds.get(), nh, dim, dring1.get(), cap, swa, dpos.get() + t, dcomp.get(),
                             c.ratio, psel ? psel + t * c.n_sel : nullptr, c.n_sel, max_rows, dscr1.get(),
                             dout1.get() + t * qd);
        cuda::check(cudaDeviceSynchronize(), "sink_attention");
      }
      std::vector<float> got(q.size()), want(q.size()), ring_got(ring.size());
      dout.download(got.data(), got.size());
      dout1.download(want.data(), want.size());
      dring.download(ring_got.data(), ring_got.size());
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
      EXPECT_EQ(ring_got, ring);
      for (const float v : got) ASSERT_LE(std::fabs(v), 1.0f);  // convex combinations of rows in [-1, 1]
    }
  }
  const int nh = 64;
  const int64_t dim = 512, qd = nh * dim;
  // Positions not consecutive (repeats, steps back, gaps; groups of 4: {700 701 702 650}, {651 900
  // 899 899}, {5 6 7}): every row from the ring, which per-token calls read alike.
  const std::vector<int64_t> pos = {700, 701, 702, 650, 651, 900, 899, 899, 5, 6, 7};
  const int n = static_cast<int>(pos.size());
  const uint32_t ratio = 128;
  const int64_t rcap = 1024, n_comp = (901 + ratio - 1) / ratio, max_rows = swa + n_comp + 2;
  std::vector<float> q(static_cast<size_t>(n * qd)), sinks(nh), ring(static_cast<size_t>(rcap * dim));
  std::vector<float> comp(static_cast<size_t>(n_comp * dim));
  for (auto* v : {&q, &sinks, &ring, &comp})
    for (float& x : *v) x = ud(rng);
  cuda::DeviceArray<float> dq(q.size()), ds(sinks.size()), dring(ring.size()), dcomp(comp.size());
  cuda::DeviceArray<float> dout(q.size()), dout1(q.size());
  cuda::DeviceArray<float> dscr(static_cast<size_t>(n * cuda::attention_scratch_floats(nh, max_rows)));
  cuda::DeviceArray<float> dscr1(static_cast<size_t>(nh * max_rows));
  cuda::DeviceArray<int64_t> dpos(pos.size());
  dq.upload(q.data(), q.size());
  ds.upload(sinks.data(), sinks.size());
  dring.upload(ring.data(), ring.size());
  dcomp.upload(comp.data(), comp.size());
  dpos.upload(pos.data(), pos.size());
  cuda::sink_attention_batch(dq.get(), qd, ds.get(), nh, dim, dring.get(), rcap, nullptr, 0, swa, dpos.get(),
                             dcomp.get(), ratio, nullptr, 0, 0, max_rows, dscr.get(), dout.get(), qd, n);
  for (int t = 0; t < n; ++t)
    cuda::sink_attention(dq.get() + t * qd, ds.get(), nh, dim, dring.get(), rcap, swa, dpos.get() + t, dcomp.get(),
                         ratio, nullptr, 0, max_rows, dscr1.get(), dout1.get() + t * qd);
  cuda::check(cudaDeviceSynchronize(), "sink_attention (positions not consecutive)");
  std::vector<float> got(q.size()), want(q.size());
  dout.download(got.data(), got.size());
  dout1.download(want.data(), want.size());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << "positions not consecutive";
}

}  // namespace
}  // namespace ds4
