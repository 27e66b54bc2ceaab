// TEMPORARY diagnostic for issue #6 (GPU->CPU snapshot gap on q2). Not a test: prints numbers.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/forward.h"
#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"
#include "engine/engine.h"

namespace ds4 {
namespace {

using test::rel_l2;

struct Capture final : cpu::ForwardTrace {
  std::map<std::string, std::vector<float>> f;
  std::map<std::string, std::vector<int32_t>> i;
  void f32(int64_t, const std::string& n, std::span<const float> v, const std::vector<int64_t>&) override {
    f[n].assign(v.begin(), v.end());
  }
  void i32(int64_t, const std::string& n, std::span<const int32_t> v, const std::vector<int64_t>&) override {
    i[n].assign(v.begin(), v.end());
  }
};

double rel(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return -1;
  if (a.empty()) return 0;
  return rel_l2(a, b);
}

// Relative L2 of frontier arrays over entries both sides hold (score > -5e29), and the count of
// entries where exactly one side is empty.
std::pair<double, int> rel_frontier(std::span<const float> ka, std::span<const float> sa,
                                    std::span<const float> kb, std::span<const float> sb) {
  std::vector<float> a, b;
  int mism = 0;
  for (size_t j = 0; j < sa.size(); ++j) {
    const bool ea = sa[j] <= -5e29f, eb = sb[j] <= -5e29f;
    if (ea != eb) { ++mism; continue; }
    if (ea) continue;
    a.push_back(ka[j]); b.push_back(kb[j]);
    a.push_back(sa[j]); b.push_back(sb[j]);
  }
  return {a.empty() ? 0.0 : rel_l2(a, b), mism};
}

void diag(const char* recipe) {
  auto engine = Engine::open({.model_path = test::tiny_model_path(recipe), .backend = "cpu", .threads = 2});
  const model::Config& cfg = engine->config();
  auto cpu = cpu::make_cpu_backend(cfg, engine->weights(), 2);
  // Without a device (local dry run) a second CPU backend stands in for the GPU.
  auto gpu = cuda::device_count() ? cuda::make_cuda_backend(cfg, engine->weights())
                                  : cpu::make_cpu_backend(cfg, engine->weights(), 2);
  const size_t V = cfg.n_vocab;
  const int64_t N = 320, CTX = 512;
  const auto prompt = test::prompt_tokens(N + 1, cfg.n_vocab, 987654321);
  std::vector<float> lc(V), lg(V);
  model::KvState snap(cfg, CTX), gstate300(cfg, CTX), cstate300(cfg, CTX);
  std::vector<float> g300(V);
  // Sweep 1: GPU builds, at every position the CPU continues from the GPU's exported state.
  std::vector<double> e_gc(N, 0), e_cg(N, 0);
  {
    auto g = gpu->new_session(CTX), c = cpu->new_session(CTX);
    for (int64_t p = 0; p < N; ++p) {
      if (p > 0) {
        g->export_state(snap);
        if (p == 300) gstate300 = snap;
        c->import_state(snap);
        c->eval({&prompt[p], 1}, p, lc, {});
      }
      g->eval({&prompt[p], 1}, p, lg, {});
      if (p == 300) g300 = lg;
      if (p > 0) e_gc[p] = rel_l2(lg, lc);
    }
  }
  // Sweep 2: the CPU builds, the GPU continues from the CPU's state.
  {
    auto g = gpu->new_session(CTX), c = cpu->new_session(CTX);
    for (int64_t p = 0; p < N; ++p) {
      if (p > 0) {
        c->export_state(snap);
        if (p == 300) cstate300 = snap;
        g->import_state(snap);
        g->eval({&prompt[p], 1}, p, lg, {});
      }
      c->eval({&prompt[p], 1}, p, lc, {});
      if (p > 0) e_cg[p] = rel_l2(lg, lc);
    }
  }
  for (int dir = 0; dir < 2; ++dir) {
    const auto& e = dir ? e_cg : e_gc;
    std::vector<double> s(e.begin() + 1, e.end());
    std::sort(s.begin(), s.end());
    int n5 = 0, n4 = 0, n3 = 0;
    std::string spikes;
    for (int64_t p = 1; p < N; ++p) {
      n5 += e[p] > 1e-5; n4 += e[p] > 1e-4; n3 += e[p] > 1e-3;
      if (e[p] > 1e-5) spikes += fmt::format(" {}:{:.2g}", p, e[p]);
    }
    std::printf("[%s] %s sweep over %ld positions: median %.3g p90 %.3g max %.3g; >1e-5: %d, >1e-4: %d, >1e-3: %d\n  spikes:%s\n",
                recipe, dir ? "CPU->GPU" : "GPU->CPU", static_cast<long>(N - 1), s[s.size() / 2],
                s[s.size() * 9 / 10], s.back(), n5, n4, n3, spikes.c_str());
  }
  // Field by field at 300 tokens: GPU-exported vs CPU-built state.
  const size_t HD = cfg.head_dim, ID = cfg.indexer_head_dim;
  for (size_t il = 0; il < cfg.n_layer; ++il) {
    const auto& a = gstate300.layers()[il];
    const auto& b = cstate300.layers()[il];
    std::printf("[%s] state@300 l%zu r%u raw %.3g", recipe, il, a.ratio, rel(a.raw, b.raw));
    if (a.ratio) {
      const auto [fk, fm] = rel_frontier(a.comp_state->state_kv(), a.comp_state->state_score(),
                                         b.comp_state->state_kv(), b.comp_state->state_score());
      std::printf(" comp %zu/%zu rows %.3g front %.3g (empty mismatch %d) tokens %u/%u", a.n_comp(HD),
                  b.n_comp(HD), rel(a.comp, b.comp), fk, fm, a.comp_state->n_tokens(), b.comp_state->n_tokens());
    }
    if (a.ratio == 4) {
      const auto [fk, fm] = rel_frontier(a.index_state->state_kv(), a.index_state->state_score(),
                                         b.index_state->state_kv(), b.index_state->state_score());
      std::printf(" index %zu/%zu rows %.3g front %.3g (empty mismatch %d) tokens %u/%u", a.index.size() / ID,
                  b.index.size() / ID, rel(a.index, b.index), fk, fm, a.index_state->n_tokens(),
                  b.index_state->n_tokens());
    }
    std::printf("\n");
  }
  // Per-layer probes of step 300 (from the GPU state) on each backend: the raw row it stored
  // (attention input h of layer il through attn_kv, norm, RoPE, FP8, f16) and the compressor
  // frontier row it wrote (h through comp_kv / comp_gate). Where the two backends' step first
  // parts, these first differ.
  {
    auto g = gpu->new_session(CTX), c = cpu->new_session(CTX);
    g->import_state(gstate300);
    c->import_state(gstate300);
    g->eval({&prompt[300], 1}, 300, lg, {});
    c->eval({&prompt[300], 1}, 300, lc, {});
    model::KvState a(cfg, CTX), b(cfg, CTX);
    g->export_state(a);
    c->export_state(b);
    const size_t slot = 300 % a.raw_cap();
    for (size_t il = 0; il < cfg.n_layer; ++il) {
      const auto& A = a.layers()[il];
      const auto& B = b.layers()[il];
      std::span<const float> ra(&A.raw[slot * HD], HD), rb(&B.raw[slot * HD], HD);
      int ndiff = 0;
      for (size_t j = 0; j < HD; ++j) ndiff += ra[j] != rb[j];
      std::printf("[%s] step 300 probe l%zu: raw row rel %.3g (%d of %zu values differ)", recipe, il,
                  rel_l2(ra, rb), ndiff, HD);
      if (A.ratio) {
        const size_t w = A.comp_state->width();
        const size_t row = A.ratio == 4 ? 4 + 300 % 4 : 300 % A.ratio;
        std::printf(" comp kv %.3g score %.3g", rel_l2(A.comp_state->state_kv().subspan(row * w, w), B.comp_state->state_kv().subspan(row * w, w)),
                    rel_l2(A.comp_state->state_score().subspan(row * w, w), B.comp_state->state_score().subspan(row * w, w)));
      }
      std::printf("\n");
    }
    std::printf("[%s] step 300 from the GPU state: logits rel L2 %.3g\n", recipe, rel_l2(lg, lc));
  }
  // Perturbation trials: the GPU state with every raw-ring value of layer 0 scaled by
  // (1 + k*1e-6), continued on both backends. A value sitting on a rounding boundary moves off
  // it; a wrongly exported field stays wrong.
  {
    std::string out;
    auto g = gpu->new_session(CTX), c = cpu->new_session(CTX);
    std::vector<float> lc0(V);
    c->import_state(gstate300);
    c->eval({&prompt[300], 1}, 300, lc0, {});
    for (int k = 1; k <= 8; ++k) {
      model::KvState st = gstate300;
      for (float& v : st.layers()[0].raw) v *= 1.0f + static_cast<float>(k) * 1e-6f;
      g->import_state(st);
      c->import_state(st);
      g->eval({&prompt[300], 1}, 300, lg, {});
      c->eval({&prompt[300], 1}, 300, lc, {});
      out += fmt::format(" {:.2g} (CPU moved {:.2g})", rel_l2(lg, lc), rel_l2(lc, lc0));
    }
    std::printf("[%s] pos 300 from the GPU state perturbed (x(1+k*1e-6), k=1..8), GPU vs CPU rel L2:%s\n", recipe,
                out.c_str());
  }
  // Position 300 from the GPU state on the CPU, traced: the discrete decisions and their margins.
  const int64_t P = 300;
  auto cpu_step = [&](const model::Weights& w, const model::KvState& st, Capture* cap) {
    cpu::Forward f(cfg, w, 2);
    f.set_trace(cap);
    model::KvState s = st;
    std::vector<float> out(V);
    f.eval({&prompt[P], 1}, P, s, out);
    return out;
  };
  Capture cap;
  const auto base = cpu_step(engine->weights(), gstate300, &cap);
  std::printf("[%s] pos 300: CPU(from GPU state) vs GPU rel L2 %.3g\n", recipe, rel_l2(g300, base));
  struct Decision { double margin; std::string what; int layer; bool indexer; int in, out; float sin, sout; };
  std::vector<Decision> ds;
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    const std::string L = fmt::format("l{}.", il);
    if (cap.f.count(L + "idx.scores") && cap.i.count(L + "idx.selected")) {
      const auto& sc = cap.f[L + "idx.scores"];
      const auto& sel = cap.i[L + "idx.selected"];
      std::vector<bool> in(sc.size(), false);
      for (int32_t s : sel) in[s] = true;
      int worst_in = -1, best_out = -1;
      for (int r = 0; r < static_cast<int>(sc.size()); ++r) {
        if (in[r] && (worst_in < 0 || sc[r] < sc[worst_in])) worst_in = r;
        if (!in[r] && (best_out < 0 || sc[r] > sc[best_out])) best_out = r;
      }
      const double m = (sc[worst_in] - sc[best_out]) / std::max(std::fabs(sc[worst_in]), 1e-30f);
      ds.push_back({m, fmt::format("indexer l{} in {} ({:.9g}) out {} ({:.9g})", il, worst_in, sc[worst_in], best_out, sc[best_out]),
                    static_cast<int>(il), true, worst_in, best_out, sc[worst_in], sc[best_out]});
    }
    if (!cfg.is_hash_layer(il)) {
      const auto& p = cap.f[L + "router.probs"];
      const auto& sel = cap.i[L + "router.experts"];
      const auto& b = engine->weights().layers[il].exp_probs_b;
      auto score = [&](int e) { return p[e] + (b.empty() ? 0.0f : b[e]); };
      std::vector<bool> in(p.size(), false);
      for (int32_t s : sel) in[s] = true;
      int worst_in = -1, best_out = -1;
      for (int e = 0; e < static_cast<int>(p.size()); ++e) {
        if (in[e] && (worst_in < 0 || score(e) < score(worst_in))) worst_in = e;
        if (!in[e] && (best_out < 0 || score(e) > score(best_out))) best_out = e;
      }
      const double m = (score(worst_in) - score(best_out)) / std::max(std::fabs(score(worst_in)), 1e-30f);
      ds.push_back({m, fmt::format("router l{} in {} ({:.9g}) out {} ({:.9g})", il, worst_in, score(worst_in), best_out, score(best_out)),
                    static_cast<int>(il), false, worst_in, best_out, score(worst_in), score(best_out)});
    }
  }
  std::sort(ds.begin(), ds.end(), [](const Decision& a, const Decision& b) { return a.margin < b.margin; });
  // Counterfactual: flip one near-tied decision on the CPU (indexer: scale the out row's index
  // vector so its score passes the in row's; router: raise the out expert's bias past the in
  // expert's score) and see whether the CPU then reproduces the GPU's logits.
  for (size_t k = 0; k < std::min<size_t>(ds.size(), 4); ++k) {
    const Decision& d = ds[k];
    double e = -1;
    if (d.indexer) {
      model::KvState st = gstate300;
      auto& idx = st.layers()[d.layer].index;
      const float f = d.sout > 0 ? d.sin / d.sout * (1.0f + 1e-5f) : 1.0f;
      for (size_t j = 0; j < ID; ++j) idx[d.out * ID + j] *= f;
      e = rel_l2(g300, cpu_step(engine->weights(), st, nullptr));
    } else {
      model::Weights w = engine->weights();
      auto& b = w.layers[d.layer].exp_probs_b;
      if (b.empty()) b.assign(cfg.n_expert, 0.0f);
      b[d.out] += (d.sin - d.sout) + 1e-5f * std::fabs(d.sin);
      e = rel_l2(g300, cpu_step(w, gstate300, nullptr));
    }
    std::printf("[%s] decision #%zu rel margin %.3g: %s -> flipped on the CPU: rel L2 vs GPU %.3g\n", recipe, k,
                d.margin, d.what.c_str(), e);
  }
  // Every decision with a relative margin below 1e-4 flipped together.
  {
    model::KvState st = gstate300;
    model::Weights w = engine->weights();
    int n = 0;
    for (const Decision& d : ds) {
      if (d.margin >= 1e-4) break;
      ++n;
      if (d.indexer) {
        auto& idx = st.layers()[d.layer].index;
        const float f = d.sout > 0 ? d.sin / d.sout * (1.0f + 1e-5f) : 1.0f;
        for (size_t j = 0; j < ID; ++j) idx[d.out * ID + j] *= f;
      } else {
        if (w.layers[d.layer].exp_probs_b.empty()) w.layers[d.layer].exp_probs_b.assign(cfg.n_expert, 0.0f);
        w.layers[d.layer].exp_probs_b[d.out] += (d.sin - d.sout) + 1e-5f * std::fabs(d.sin);
      }
    }
    std::printf("[%s] %d decisions with margin < 1e-4 flipped together: rel L2 vs GPU %.3g\n", recipe, n,
                rel_l2(g300, cpu_step(w, st, nullptr)));
  }
}

TEST(SnapshotDiag, DISABLED_Run) {
  diag("q2");
  diag("q4");
  diag("f32");
}

}  // namespace
}  // namespace ds4

namespace ds4 {
namespace {

struct Ordered final : cpu::ForwardTrace {
  std::vector<std::pair<std::string, std::vector<float>>> v;
  void f32(int64_t, const std::string& n, std::span<const float> x, const std::vector<int64_t>&) override {
    v.emplace_back(n, std::vector<float>(x.begin(), x.end()));
  }
  void i32(int64_t, const std::string& n, std::span<const int32_t> x, const std::vector<int64_t>&) override {
    v.emplace_back(n, std::vector<float>(x.begin(), x.end()));
  }
};

// CPU only: a state perturbed by 1e-6 relative; where does the step first jump?
TEST(SnapshotDiag, DISABLED_CpuSensitivity) {
  const char* recipe = std::getenv("DIAG_RECIPE") ? std::getenv("DIAG_RECIPE") : "q4";
  const int k0 = std::getenv("DIAG_K") ? std::atoi(std::getenv("DIAG_K")) : 5;
  auto engine = Engine::open({.model_path = test::tiny_model_path(recipe), .backend = "cpu", .threads = 2});
  const model::Config& cfg = engine->config();
  const auto prompt = test::prompt_tokens(301, cfg.n_vocab, 987654321);
  model::KvState st(cfg, 512);
  cpu::Forward f(cfg, engine->weights(), 2);
  std::vector<float> l(cfg.n_vocab), la(cfg.n_vocab), lb(cfg.n_vocab);
  f.eval({prompt.data(), 300}, 0, st, l);
  Ordered ta, tb;
  for (int k : {k0, k0 + 1}) {
    model::KvState s = st;
    for (float& v : s.layers()[0].raw) v *= 1.0f + static_cast<float>(k) * 1e-6f;
    f.set_trace(k == k0 ? &ta : &tb);
    f.eval({&prompt[300], 1}, 300, s, k == k0 ? la : lb);
  }
  std::printf("logits rel %.3g\n", rel_l2(lb, la));
  for (size_t i = 0; i < ta.v.size(); ++i) {
    const auto& [n, a] = ta.v[i];
    const auto& b = tb.v[i].second;
    int nd = 0;
    for (size_t j = 0; j < a.size(); ++j) nd += a[j] != b[j];
    std::printf("%-22s rel %.3g  (%d/%zu differ)\n", n.c_str(), rel_l2(b, a), nd, a.size());
  }
}

}  // namespace
}  // namespace ds4
