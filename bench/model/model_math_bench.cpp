// Per-token costs of the model math units at DeepSeek V4 Flash sizes (one thread).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "model/attention.h"
#include "model/compressor.h"
#include "model/hyper_connections.h"
#include "model/indexer.h"
#include "model/kv_quant.h"
#include "model/rope.h"
#include "model/router.h"

namespace {

using namespace ds4::model;

std::vector<float> random_vector(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// 64 heads x 512 over 128 raw rows + 512 selected compressed rows.
void BM_SinkAttention(benchmark::State& state) {
  const size_t n_rows = static_cast<size_t>(state.range(0));
  const auto q = random_vector(64 * 512, 1, -0.1f, 0.1f);
  const auto sinks = random_vector(64, 2);
  const auto kv = random_vector(n_rows * 512, 3);
  std::vector<const float*> rows(n_rows);
  for (size_t j = 0; j < n_rows; ++j) rows[j] = kv.data() + j * 512;
  std::vector<float> out(64 * 512), scratch(n_rows);
  for (auto _ : state) {
    sink_attention(q, sinks, rows, out, scratch);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n_rows));
}
BENCHMARK(BM_SinkAttention)->Arg(128)->Arg(640);

// Indexer scores of 64 x 128 queries over n compressed rows, then top-512.
void BM_IndexerScoresTopK(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const auto q = random_vector(64 * 128, 4);
  const auto w = random_vector(64, 5);
  const auto rows = random_vector(n * 128, 6);
  std::vector<float> scores(n);
  std::vector<uint32_t> idx(n);
  for (auto _ : state) {
    indexer_scores(q, w, rows, scores);
    benchmark::DoNotOptimize(indexer_select_top_k(scores, 512, idx));
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n));
}
BENCHMARK(BM_IndexerScoresTopK)->Arg(1024)->Arg(8192);

void BM_Fp8KvRow(benchmark::State& state) {
  const auto x0 = random_vector(448, 7, -3, 3);
  auto x = x0;
  for (auto _ : state) {
    x = x0;
    fp8_kv_round_trip(x);
    benchmark::DoNotOptimize(x.data());
  }
}
BENCHMARK(BM_Fp8KvRow);

void BM_IndexerQatHeads64(benchmark::State& state) {
  const auto x0 = random_vector(64 * 128, 8, -3, 3);
  auto x = x0;
  for (auto _ : state) {
    x = x0;
    for (size_t h = 0; h < 64; ++h) indexer_qat_row(std::span<float>(x).subspan(h * 128, 128));
    benchmark::DoNotOptimize(x.data());
  }
}
BENCHMARK(BM_IndexerQatHeads64);

void BM_RopeTail64Heads(benchmark::State& state) {
  const RopeParams p = rope_params_for_layer(RopeConfig{}, 4);
  auto x = random_vector(64 * 512, 9);
  uint32_t pos = 1000;
  for (auto _ : state) {
    rope_tail(x, 512, p, pos++, false);
    benchmark::DoNotOptimize(x.data());
  }
}
BENCHMARK(BM_RopeTail64Heads);

// One HC pre + post around a sublayer (without the W_fn matvec; with the state norm's scale).
void BM_HyperConnectionPrePost(benchmark::State& state) {
  const auto x = random_vector(4 * 4096, 10);
  const auto y = random_vector(4096, 11);
  const auto mix = random_vector(24, 12), scale = random_vector(3, 13), base = random_vector(24, 14);
  std::vector<float> pre(4), post(4), comb(16), xs(4096), out(4 * 4096);
  for (auto _ : state) {
    benchmark::DoNotOptimize(rms_scale(x));
    hc_split_sinkhorn(mix, scale, base, 20, kHcEps, pre, post, comb);
    hc_weighted_sum(x, pre, xs);
    hc_post(y, x, post, comb, out);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_HyperConnectionPrePost);

// Average per-token compressor push (ratio 4, attention rows of 512; emits every 4th token).
void BM_CompressorPushRatio4(benchmark::State& state) {
  CompressorParams prm;
  prm.ratio = 4;
  prm.head_dim = 512;
  prm.rope = rope_params_for_layer(RopeConfig{}, 4);
  Compressor comp(prm);
  const auto kv = random_vector(1024, 15), sc = random_vector(1024, 16), norm = random_vector(512, 17);
  std::vector<float> row(512);
  for (auto _ : state) {
    if (comp.n_tokens() == 1u << 30) comp.reset();
    benchmark::DoNotOptimize(comp.push(kv, sc, comp.n_tokens(), norm, row));
  }
}
BENCHMARK(BM_CompressorPushRatio4);

void BM_RouterTop6(benchmark::State& state) {
  const auto logits = random_vector(256, 18, -4, 4), bias = random_vector(256, 19, -0.1f, 0.1f);
  std::vector<float> p(256), w(6);
  std::vector<int32_t> sel(6);
  for (auto _ : state) {
    router_probs(logits, p);
    router_select_top_k(p, bias, sel);
    router_weights(p, sel, 1.5f, w);
    benchmark::DoNotOptimize(w.data());
  }
}
BENCHMARK(BM_RouterTop6);

}  // namespace
