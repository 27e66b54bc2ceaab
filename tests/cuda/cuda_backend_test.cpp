// CUDA backend against the CPU backend (the definition of the math) on the generated tiny
// models: logits at several positions of a 320-token prompt (f32 recipe) within relative L2
// 1e-3, greedy decisions stepwise from identical states (q2 recipe), chunk-size invariance on the GPU,
// and snapshots that move between the backends. Without a CUDA device every GPU test skips and
// only the "no device" error path is checked.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <filesystem>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/graph_skip.h"
#include "backend/cuda/l2_prefetch.h"
#include "backend/cuda/launch_stream.h"
#include "common/error.h"
#include "cuda_test_util.h"
#include "engine/engine.h"

namespace ds4 {
namespace {

using test::rel_l2;

std::string model_path(const char* recipe) { return test::tiny_model_path(recipe); }

std::vector<int32_t> prompt_tokens(size_t n, uint32_t vocab) { return test::prompt_tokens(n, vocab, 987654321); }

int32_t argmax(std::span<const float> v) {
  size_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[best]) best = i;
  return static_cast<int32_t>(best);
}

bool have_device() { return cuda::device_count() > 0; }

// Greedy decode of `steps` tokens on two sessions from their logits la and lb (byte-equal on
// entry, the next position pos0): the logits must stay byte-equal at every step.
void expect_equal_greedy_decode(BackendSession& a, BackendSession& b, std::vector<float>& la, std::vector<float>& lb,
                                int64_t pos0, int steps) {
  for (int i = 0; i < steps; ++i) {
    const int32_t t = argmax(la);
    a.eval({&t, 1}, pos0 + i, la, {});
    b.eval({&t, 1}, pos0 + i, lb, {});
    ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float))) << "decode step " << i;
  }
}

class CudaVsCpu : public ::testing::Test {
 protected:
  void open(const char* recipe) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA backend tests skipped";
    const auto path = model_path(recipe);
    ASSERT_TRUE(std::filesystem::exists(path)) << path << " (built by the ds4_models target)";
    engine_ = Engine::open({.model_path = path, .backend = "cpu", .threads = 2});
    cpu_ = cpu::make_cpu_backend(engine_->config(), engine_->weights(), 2);
    gpu_ = cuda::make_cuda_backend(engine_->config(), engine_->weights());
    V_ = engine_->config().n_vocab;
  }
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Backend> cpu_, gpu_;
  size_t V_ = 0;
};

TEST_F(CudaVsCpu, LogitsMatchCpuAlongLongPromptF32) {
  open("f32");
  if (IsSkipped()) return;
  EXPECT_EQ(gpu_->name(), "cuda");
  const auto prompt = prompt_tokens(320, engine_->config().n_vocab);
  auto c = cpu_->new_session(512), g = gpu_->new_session(512);
  std::vector<float> lc(V_), lg(V_);
  int64_t pos = 0;
  for (int64_t stop : {1, 37, 150, 256, 320}) {
    std::span<const int32_t> chunk(prompt.data() + pos, static_cast<size_t>(stop - pos));
    c->eval(chunk, pos, lc, {});
    g->eval(chunk, pos, lg, {});
    pos = stop;
    const double e = rel_l2(lg, lc);
    std::printf("[f32] position %ld: logits rel L2 %.3g\n", static_cast<long>(stop - 1), e);
    EXPECT_LT(e, 1e-3) << "after " << stop << " tokens";
  }
}

// Greedy decisions from identical states (docs/parity.md, "CUDA backend"): the GPU is not
// bit-identical to the CPU on quantized recipes (1-ulp differences flip activation codes and
// near-tied discrete choices), so a free-running continuation drifts apart. Instead, at each of
// 64 steps the CPU's state is copied into the GPU session and both evaluate the CPU's greedy
// token. Tolerances: per-step next-token logits rel L2 < 1e-2 (measured 2.2e-7: no code flips
// in these 64 steps; a flip moves them by 1e-3 .. 0.2 at its position), and the greedy choices agree unless the CPU's margin between them is
// below 1e-3 of its logit range (a near-tie).
TEST_F(CudaVsCpu, GreedyDecisionsAgreeStepwiseFromIdenticalStatesQ2) {
  open("q2");
  if (IsSkipped()) return;
  const model::Config& cfg = engine_->config();
  const auto prompt = prompt_tokens(40, cfg.n_vocab);
  auto c = cpu_->new_session(256), g = gpu_->new_session(256);
  std::vector<float> lc(V_), lg(V_);
  c->eval(prompt, 0, lc, {});
  int64_t pos = static_cast<int64_t>(prompt.size());
  double worst = 0;
  int disagree = 0;
  model::KvState snap(cfg, 256);
  for (int i = 0; i < 64; ++i, ++pos) {
    const int32_t t = argmax(lc);
    c->export_state(snap);
    g->import_state(snap);
    c->eval({&t, 1}, pos, lc, {});
    g->eval({&t, 1}, pos, lg, {});
    const double e = rel_l2(lg, lc);
    worst = std::max(worst, e);
    EXPECT_LT(e, 1e-2) << "step " << i;
    const int32_t a = argmax(lc), b = argmax(lg);
    if (a != b) {
      ++disagree;
      const auto [lo, hi] = std::minmax_element(lc.begin(), lc.end());
      EXPECT_LE(lc[a] - lc[b], 1e-3 * (*hi - *lo)) << "step " << i << ": GPU chose " << b << ", CPU " << a;
    }
  }
  std::printf("[q2] stepwise greedy, 64 steps from identical states: worst rel L2 %.3g, %d near-tie disagreements\n",
              worst, disagree);
}

TEST_F(CudaVsCpu, ChunkSizeInvariantOnGpu) {
  open("q2");
  if (IsSkipped()) return;
  const auto prompt = prompt_tokens(300, engine_->config().n_vocab);
  auto whole = gpu_->new_session(512);
  std::vector<float> all(prompt.size() * V_), last(V_);
  whole->eval(prompt, 0, last, all);
  EXPECT_EQ(std::vector<float>(all.end() - static_cast<ptrdiff_t>(V_), all.end()), last);
  for (size_t chunk : {1, 7, 64}) {
    auto s = gpu_->new_session(512);
    std::vector<float> l(V_);
    for (size_t p = 0; p < prompt.size(); p += chunk) {
      const size_t n = std::min(chunk, prompt.size() - p);
      s->eval({prompt.data() + p, n}, static_cast<int64_t>(p), l, {});
      // Every chunk's last logits equal the whole-prompt run's at that position, bit for bit.
      ASSERT_EQ(0, std::memcmp(l.data(), &all[(p + n - 1) * V_], V_ * sizeof(float)))
          << "chunk " << chunk << " at " << p + n - 1;
    }
  }
}

// Field-by-field distance of two states of the same prompt (one GPU-made, one CPU-made): row and
// token counters must be equal, and which frontier entries hold a token; every array (raw
// rings, compressed and indexer rows, both frontiers over the entries holding a token) within
// relative L2 `tol`. Returns the largest distance. A field the exporter left out or zeroed
// differs by ~1, a misplaced one by O(1) (one wrong row of the 75 compressed rows: ~0.1).
double expect_states_close(const model::KvState& a, const model::KvState& b, uint32_t head_dim,
                           double tol) {
  double worst = 0;
  auto cmp = [&](std::span<const float> x, std::span<const float> y, const std::string& what) {
    EXPECT_EQ(x.size(), y.size()) << what;
    if (x.size() != y.size() || x.empty()) return;
    const double e = rel_l2(x, y);
    worst = std::max(worst, e);
    EXPECT_LT(e, tol) << what;
  };
  auto cmp_frontier = [&](const model::Compressor& x, const model::Compressor& y, const std::string& what) {
    EXPECT_EQ(x.n_tokens(), y.n_tokens()) << what;
    std::vector<float> xs, ys;
    const auto xk = x.state_kv(), xsc = x.state_score(), yk = y.state_kv(), ysc = y.state_score();
    ASSERT_EQ(xsc.size(), ysc.size()) << what;
    for (size_t j = 0; j < xsc.size(); ++j) {
      const bool ex = xsc[j] <= model::kCompressorEmptyScore * 0.5f;
      const bool ey = ysc[j] <= model::kCompressorEmptyScore * 0.5f;
      ASSERT_EQ(ex, ey) << what << " entry " << j;
      if (ex) continue;
      xs.insert(xs.end(), {xk[j], xsc[j]});
      ys.insert(ys.end(), {yk[j], ysc[j]});
    }
    cmp(xs, ys, what);
  };
  EXPECT_EQ(a.layers().size(), b.layers().size());
  for (size_t il = 0; il < std::min(a.layers().size(), b.layers().size()); ++il) {
    const model::LayerKv& x = a.layers()[il];
    const model::LayerKv& y = b.layers()[il];
    const std::string l = fmt::format("layer {}", il);
    cmp(x.raw, y.raw, l + " raw ring");
    if (!x.ratio) continue;
    EXPECT_EQ(x.n_comp(head_dim), y.n_comp(head_dim)) << l;
    cmp(x.comp, y.comp, l + " compressed rows");
    cmp_frontier(*x.comp_state, *y.comp_state, l + " compressor frontier");
    if (x.ratio != 4) continue;
    cmp(x.index, y.index, l + " indexer rows");
    cmp_frontier(*x.index_state, *y.index_state, l + " indexer frontier");
  }
  return worst;
}

// Snapshots move between the backends (issue #6, docs/parity.md "Snapshots across backends").
// f32 (no activation quantization): the GPU-made state equals the CPU-made one to 1e-3 in every
// field (measured 3.5e-5) and the next logits agree to the parity bound 1e-3 both ways (3.4e-7).
// q2: the backends' 1-ulp differences now and then flip an activation (Q8_K/Q8_0) code, which
// moves the next logits by up to ~0.2 at that one position (in either direction) and shifts the
// rows made after it, so the 300-token states differ by up to 5e-2 per field and the
// next logits by 5.3e-3 GPU->CPU; there the fields are held to 0.25 (an unfilled field is ~1),
// the logits to 2e-2, and the greedy token must agree. Layout checks rest on f32: the exporter
// does not depend on the weight types.
TEST_F(CudaVsCpu, SnapshotMovesBetweenBackends) {
  for (const char* recipe : {"f32", "q2"}) {
    open(recipe);
    if (IsSkipped()) return;
    const bool exact_math = std::strcmp(recipe, "f32") == 0;
    const auto prompt = prompt_tokens(301, engine_->config().n_vocab);
    const std::span<const int32_t> head(prompt.data(), 300);
    auto g = gpu_->new_session(512);
    std::vector<float> l(V_);
    g->eval(head, 0, l, {});
    const std::vector<float> first = l;
    model::KvState snap(engine_->config(), 512);
    g->export_state(snap);
    // The exported state is the state the CPU builds from the same prompt, field by field.
    auto c2 = cpu_->new_session(512);
    c2->eval(head, 0, l, {});
    model::KvState snap2(engine_->config(), 512);
    c2->export_state(snap2);
    const double ds = expect_states_close(snap, snap2, engine_->config().head_dim, exact_math ? 1e-3 : 0.25);
    std::printf("[%s] GPU-made vs CPU-made state after 300 tokens: worst field rel L2 %.3g\n", recipe, ds);
    // GPU -> CPU: the next token's logits agree with the GPU continuing.
    auto c = cpu_->new_session(512);
    c->import_state(snap);
    std::vector<float> next_c(V_), next_g(V_), next_g2(V_);
    c->eval({&prompt[300], 1}, 300, next_c, {});
    g->eval({&prompt[300], 1}, 300, next_g, {});
    const double e = rel_l2(next_g, next_c);
    std::printf("[%s] snapshot GPU->CPU next logits rel L2 %.3g\n", recipe, e);
    EXPECT_LT(e, exact_math ? 1e-3 : 2e-2);
    EXPECT_EQ(argmax(next_c), argmax(next_g));
    // GPU -> GPU (fresh session): bit-identical.
    auto g2 = gpu_->new_session(512);
    g2->import_state(snap);
    g2->eval({&prompt[300], 1}, 300, next_g2, {});
    EXPECT_EQ(next_g2, next_g);
    // CPU -> GPU: a CPU-built state continues on the GPU.
    auto g3 = gpu_->new_session(512);
    g3->import_state(snap2);
    std::vector<float> next_g3(V_);
    g3->eval({&prompt[300], 1}, 300, next_g3, {});
    std::vector<float> next_c2(V_);
    c2->eval({&prompt[300], 1}, 300, next_c2, {});
    const double e2 = rel_l2(next_g3, next_c2);
    std::printf("[%s] snapshot CPU->GPU next logits rel L2 %.3g\n", recipe, e2);
    EXPECT_LT(e2, exact_math ? 1e-3 : 2e-2);
    // reset() forgets everything: a rerun from position 0 repeats the first result.
    g->reset();
    std::vector<float> again(V_);
    g->eval(head, 0, again, {});
    EXPECT_EQ(again, first);
  }
}

// Snapshots at every position of a 320-token prompt, both directions: the state made by one
// backend up to position p is continued by the other for token p and compared with the maker
// continuing. A wrongly exported field shows at every position where it is read; a flipped
// code is an isolated event at a position whose values sit on a rounding boundary. f32: every
// position within the parity bound 1e-3 (measured worst 4.3e-6). q2: at most a tenth of the
// positions above 1e-5 (measured 6 and 7 of 319, each direction) and none at 0.5 (worst 0.21,
// position 32 in both directions).
TEST_F(CudaVsCpu, SnapshotsAtEveryPositionContinueOnTheOtherBackend) {
  for (const char* recipe : {"f32", "q2"}) {
    open(recipe);
    if (IsSkipped()) return;
    const bool exact_math = std::strcmp(recipe, "f32") == 0;
    const int64_t n = 320;
    const auto prompt = prompt_tokens(n, engine_->config().n_vocab);
    for (bool gpu_makes : {true, false}) {
      auto maker = (gpu_makes ? gpu_ : cpu_)->new_session(512);
      auto other = (gpu_makes ? cpu_ : gpu_)->new_session(512);
      model::KvState snap(engine_->config(), 512);
      std::vector<float> lm(V_), lo(V_);
      std::vector<double> e;
      int above = 0;
      std::string spikes;
      for (int64_t p = 0; p < n; ++p) {
        if (p > 0) {
          maker->export_state(snap);
          other->import_state(snap);
          other->eval({&prompt[p], 1}, p, lo, {});
        }
        maker->eval({&prompt[p], 1}, p, lm, {});
        if (p == 0) continue;
        e.push_back(rel_l2(lm, lo));
        if (e.back() > 1e-5) {
          ++above;
          spikes += fmt::format(" {}:{:.2g}", p, e.back());
        }
      }
      const double worst = *std::max_element(e.begin(), e.end());
      std::printf("[%s] %s snapshots at %zu positions: worst rel L2 %.3g, %d above 1e-5:%s\n", recipe,
                  gpu_makes ? "GPU->CPU" : "CPU->GPU", e.size(), worst, above, spikes.c_str());
      if (exact_math) {
        EXPECT_LT(worst, 1e-3);
      } else {
        EXPECT_LT(worst, 0.5);
        EXPECT_LE(above, static_cast<int>(e.size()) / 10);
      }
    }
  }
}

TEST_F(CudaVsCpu, BadInputsAreRejected) {
  open("q2");
  if (IsSkipped()) return;
  auto g = gpu_->new_session(16);
  std::vector<float> l(V_);
  const int32_t bad = static_cast<int32_t>(engine_->config().n_vocab);
  EXPECT_THROW(g->eval({&bad, 1}, 0, l, {}), Error);
  const int32_t ok = 1;
  EXPECT_THROW(g->eval({&ok, 1}, 16, l, {}), Error);
  model::KvState wrong(engine_->config(), 32);
  EXPECT_THROW(g->import_state(wrong), Error);
  EXPECT_THROW(cuda::make_cuda_backend(engine_->config(), engine_->weights(), {.device = 99}), Error);
}

// Decode throughput on the tiny models (printed; no threshold: tuning is a later pass).
TEST_F(CudaVsCpu, DecodeThroughput) {
  for (const char* recipe : {"q2", "f32"}) {
    open(recipe);
    if (IsSkipped()) return;
    auto g = gpu_->new_session(1024);
    std::vector<float> l(V_);
    const auto prompt = prompt_tokens(64, engine_->config().n_vocab);
    g->eval(prompt, 0, l, {});
    int32_t t = argmax(l);
    const int n = 256;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      g->eval({&t, 1}, 64 + i, l, {});
      t = argmax(l);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[%s] CUDA decode: %.1f tok/s (%d tokens, ctx 1024)\n", recipe, n / s, n);
    EXPECT_GT(n / s, 0.0);
  }
}

// The decode step replayed from captured CUDA graphs gives the same bytes as launching its
// kernels one by one (DS4_CUDA_GRAPH=0), across the indexer switch-on (tiny: pos 35).
TEST_F(CudaVsCpu, GraphReplayEqualsKernelByKernelLaunches) {
  open("q2");
  if (IsSkipped()) return;
  const auto prompt = prompt_tokens(100, engine_->config().n_vocab);
  setenv("DS4_CUDA_GRAPH", "0", 1);
  auto eager = gpu_->new_session(256);
  unsetenv("DS4_CUDA_GRAPH");
  auto graph = gpu_->new_session(256);
  std::vector<float> a(prompt.size() * V_), b(prompt.size() * V_), la(V_), lb(V_);
  eager->eval(prompt, 0, la, a);
  graph->eval(prompt, 0, lb, b);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  // Decode steps (logits graph) after the prefill.
  expect_equal_greedy_decode(*eager, *graph, la, lb, static_cast<int64_t>(prompt.size()), 8);
}

// Decode call sites launched without PDL (DS4_CUDA_NO_PDL, every site) give the same bytes as
// launches with PDL at every site (an empty value); an unknown site name is a clear error when a session is made.
TEST_F(CudaVsCpu, NoPdlSitesKeepResultsAndUnknownSitesAreErrors) {
  open("q2");
  if (IsSkipped()) return;
  const auto prompt = prompt_tokens(40, engine_->config().n_vocab);
  setenv("DS4_CUDA_NO_PDL", "hc_pre:qa_kv:q_b:attn:o_a:o_b:router:gate_up:down:shexp:comp:aux:sinkhorn", 1);
  auto off = gpu_->new_session(128);
  setenv("DS4_CUDA_NO_PDL", "q_b:nope", 1);
  try {
    gpu_->new_session(128);
    ADD_FAILURE() << "an unknown DS4_CUDA_NO_PDL site was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DS4_CUDA_NO_PDL: unknown site 'nope'"), std::string::npos) << e.what();
  }
  setenv("DS4_CUDA_NO_PDL", "", 1);  // every site with PDL (unset: the default, shexp without)
  auto on = gpu_->new_session(128);
  unsetenv("DS4_CUDA_NO_PDL");
  std::vector<float> la(V_), lb(V_);
  off->eval(prompt, 0, la, {});
  on->eval(prompt, 0, lb, {});
  ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), V_ * sizeof(float)));
  // Decode steps: the sites are on the decode path.
  expect_equal_greedy_decode(*off, *on, la, lb, static_cast<int64_t>(prompt.size()), 6);
}

// The attention's decode switches one at a time give the default's bytes: DS4_CUDA_ATTN_ROPE_FUSED=0
// (the inverse RoPE in a launch of its own, so the combine must not hand o_a a Q8_0 copy from
// before it), DS4_CUDA_ATTN_Q8_FUSED=0 (o_a quantizes its input itself), DS4_CUDA_IDX_FIRST=0 (the
// indexer compressor after the main one, the indexer scores waiting for both), DS4_CUDA_KV_MAIN=0
// / =2 (the KV row's store on the aux stream everywhere / on the main stream everywhere). The
// tiny model's indexer (top-k 8) runs from the prompt's 40 tokens on.
TEST_F(CudaVsCpu, AttentionDecodeSwitchesKeepResults) {
  open("q2");
  if (IsSkipped()) return;
  const auto prompt = prompt_tokens(40, engine_->config().n_vocab);
  auto fused = gpu_->new_session(128);
  std::vector<float> la(V_), lb(V_);
  fused->eval(prompt, 0, la, {});
  const std::pair<const char*, const char*> switches[] = {{"DS4_CUDA_ATTN_ROPE_FUSED", "0"},
                                                          {"DS4_CUDA_ATTN_Q8_FUSED", "0"},
                                                          {"DS4_CUDA_IDX_FIRST", "0"},
                                                          {"DS4_CUDA_KV_MAIN", "0"},
                                                          {"DS4_CUDA_KV_MAIN", "2"}};
  for (const auto& [var, value] : switches) {
    SCOPED_TRACE(std::string(var) + "=" + value);
    setenv(var, value, 1);
    auto off = gpu_->new_session(128);
    unsetenv(var);
    off->eval(prompt, 0, lb, {});
    ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), V_ * sizeof(float)));
    auto ref = gpu_->new_session(128);  // a fresh default session for the same decode steps
    std::vector<float> lr(V_);
    ref->eval(prompt, 0, lr, {});
    expect_equal_greedy_decode(*ref, *off, lr, lb, static_cast<int64_t>(prompt.size()), 6);
  }
}

// DS4_CUDA_SMEM_LIMIT's value (host only, no device needed: it is read before the device is
// asked): a whole number of bytes from 16384, below every device's limit (and the 48 KiB assumed
// without a device) taken as it is; anything else is a clear error.
TEST(CudaSmemLimit, ReadsTheEnvironmentAndRejectsBadValues) {
  setenv("DS4_CUDA_SMEM_LIMIT", "20000", 1);
  EXPECT_EQ(cuda::smem_limit(), size_t{20000});
  for (const char* bad : {"", "abc", "16383", "-65536", " 65536", "+65536", "99K", "99999999999999999999999"}) {
    setenv("DS4_CUDA_SMEM_LIMIT", bad, 1);
    try {
      cuda::smem_limit();
      ADD_FAILURE() << "DS4_CUDA_SMEM_LIMIT=" << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is not a shared memory size in bytes"), std::string::npos) << e.what();
    }
  }
  unsetenv("DS4_CUDA_SMEM_LIMIT");
}

// DS4_CUDA_SMEM_LIMIT lowers the shared memory the launchers may use (never raises it past the
// device's opt-in maximum), and a session under the 99 KiB of sm_86 / sm_89 / sm_120 gives the
// default's bytes: prefill, then greedy decode steps (each launch of more than the limit would
// throw).
TEST_F(CudaVsCpu, SmallSharedMemoryLimitKeepsResults) {
  open("q2");
  if (IsSkipped()) return;
  int optin = 0;
  ASSERT_EQ(cudaSuccess, cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  unsetenv("DS4_CUDA_SMEM_LIMIT");
  EXPECT_EQ(cuda::smem_limit(), static_cast<size_t>(optin));
  setenv("DS4_CUDA_SMEM_LIMIT", "100000000", 1);
  EXPECT_EQ(cuda::smem_limit(), static_cast<size_t>(optin));
  constexpr size_t k99KiB = 99 * 1024;
  setenv("DS4_CUDA_SMEM_LIMIT", "101376", 1);
  EXPECT_EQ(cuda::smem_limit(), std::min(k99KiB, static_cast<size_t>(optin)));
  unsetenv("DS4_CUDA_SMEM_LIMIT");

  const auto prompt = prompt_tokens(40, engine_->config().n_vocab);
  const int steps = 6;
  // Logits after the prompt and after each greedy step, with the limit set or not.
  const auto run = [&](bool small) {
    if (small) setenv("DS4_CUDA_SMEM_LIMIT", "101376", 1);
    std::vector<std::vector<float>> out;
    auto s = gpu_->new_session(128);
    std::vector<float> l(V_);
    s->eval(prompt, 0, l, {});
    out.push_back(l);
    for (int i = 0; i < steps; ++i) {
      const int32_t t = argmax(l);
      s->eval({&t, 1}, static_cast<int64_t>(prompt.size()) + i, l, {});
      out.push_back(l);
    }
    unsetenv("DS4_CUDA_SMEM_LIMIT");
    return out;
  };
  const auto want = run(false), got = run(true);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(0, std::memcmp(want[i].data(), got[i].data(), V_ * sizeof(float))) << "step " << i;
}

// DS4_CUDA_NO_PDL's parser (host only, no device needed): the sites' bits in NoPdlSite order,
// the shared expert's for an unset value (the default), none for an empty one, an error naming
// an unknown or empty site.
// DS4_CUDA_GRAPH_SKIP's regex (graph_skip.h): unset or empty is none, a pattern matches the
// mangled kernel names it is meant for, and an invalid one is a clear error naming the variable.
TEST(CudaGraphSkip, ParsesRegexesAndRejectsInvalidOnes) {
  EXPECT_FALSE(cuda::parse_graph_skip(nullptr));
  EXPECT_FALSE(cuda::parse_graph_skip(""));
  const auto re = cuda::parse_graph_skip("attn_|matvec_stream_kernelILj8E");
  ASSERT_TRUE(re);
  EXPECT_TRUE(std::regex_search("_ZN3ds44cuda12_GLOBAL__N_119attn_combine_kernelILi768EEEvPKf", *re));
  EXPECT_TRUE(std::regex_search("_ZN3ds44cuda12_GLOBAL__N_120matvec_stream_kernelILj8ELb1EEEvNS0_", *re));
  EXPECT_FALSE(std::regex_search("_ZN3ds44cuda12_GLOBAL__N_120matvec_stream_kernelILj1ELb1EEEvNS0_", *re));
  try {
    cuda::parse_graph_skip("attn_(");
    FAIL() << "expected ds4::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DS4_CUDA_GRAPH_SKIP: 'attn_(' is not a valid regex"), std::string::npos)
        << e.what();
  }
}

TEST(CudaPrefetchSites, ParsesSiteListsAndRejectsUnknownNames) {
  using cuda::PrefetchSite;
  const auto bit = [](PrefetchSite s) { return 1u << static_cast<unsigned>(s); };
  const unsigned all = (1u << static_cast<unsigned>(PrefetchSite::Count)) - 1;
  EXPECT_EQ(cuda::parse_prefetch_sites(nullptr), 0u);
  EXPECT_EQ(cuda::parse_prefetch_sites(""), 0u);
  EXPECT_EQ(cuda::parse_prefetch_sites("o_a"), bit(PrefetchSite::Oa));
  EXPECT_EQ(cuda::parse_prefetch_sites("q:down:q"), bit(PrefetchSite::Q) | bit(PrefetchSite::Down));
  EXPECT_EQ(cuda::parse_prefetch_sites("q:idx:o_a:router:shexp:down"), all);
  for (const char* bad : {"qb", "q:", "q_b", "Q", "none"}) {
    try {
      cuda::parse_prefetch_sites(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("DS4_CUDA_PREFETCH: unknown site"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("(sites: q, idx, o_a, router, shexp, down)"), std::string::npos) << e.what();
    }
  }
}

// The bulk-prefetch chunks of a range, checked against a byte-by-byte account: they tile the
// range's 16-byte-aligned part exactly, in order, each aligned, a multiple of 16 bytes and at
// most kL2ChunkBytes long; and a grid-stride loop's start (l2_first_of) is the first index of
// the thread's residue class, as counting up from the range's first chunk finds it.
TEST(CudaL2Prefetch, ChunksTileTheAlignedSpan) {
  const uint64_t C = cuda::kL2ChunkBytes;
  for (const uint64_t a : {uint64_t{0x10000}, uint64_t{0x10003}, uint64_t{0x1000f}, uint64_t{0x10010}})
    for (const uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{15}, uint64_t{16}, uint64_t{17}, uint64_t{31},
                             C - 1, C, C + 1, C + 16, 3 * C - 5, 5 * C + 48}) {
      SCOPED_TRACE(fmt::format("a {:#x} n {}", a, n));
      // Bytes at or after a whose 16-byte line lies wholly inside [a, a + n).
      uint64_t lo = a;
      while (lo % 16 != 0) ++lo;
      uint64_t hi = a + n;
      while (hi % 16 != 0) --hi;
      const uint64_t want = hi > lo ? hi - lo : 0;
      const uint64_t k = cuda::l2_chunks(a, n);
      EXPECT_EQ(k, (want + C - 1) / C);
      uint64_t at = lo, covered = 0;
      for (uint64_t i = 0; i < k; ++i) {
        const cuda::L2Chunk c = cuda::l2_chunk(a, n, i);
        EXPECT_EQ(c.addr, at);
        EXPECT_EQ(c.addr % 16, 0u);
        EXPECT_EQ(c.bytes % 16, 0u);
        EXPECT_GT(c.bytes, 0u);
        EXPECT_LE(c.bytes, C);
        at += c.bytes;
        covered += c.bytes;
      }
      EXPECT_EQ(covered, want);
      if (k > 0) {
        EXPECT_EQ(at, hi);
      }
    }
  for (uint64_t stride : {1u, 3u, 32u, 96u})
    for (uint64_t first : {0u, 1u, 31u, 32u, 95u, 200u})
      for (uint64_t t = 0; t < stride; ++t) {
        uint64_t j = first;
        while (j % stride != t) ++j;
        EXPECT_EQ(cuda::l2_first_of(first, t, stride), j) << first << " " << t << " " << stride;
      }
}

TEST(CudaNoPdlSites, ParsesSiteListsAndRejectsUnknownNames) {
  using cuda::NoPdlSite;
  const auto bit = [](NoPdlSite s) { return 1u << static_cast<unsigned>(s); };
  EXPECT_EQ(cuda::parse_no_pdl_sites(nullptr), bit(NoPdlSite::Shexp) | bit(NoPdlSite::Aux));
  EXPECT_EQ(cuda::parse_no_pdl_sites(""), 0u);
  EXPECT_EQ(cuda::parse_no_pdl_sites("shexp"), bit(NoPdlSite::Shexp));
  EXPECT_EQ(cuda::parse_no_pdl_sites("hc_pre:gate_up:hc_pre"), bit(NoPdlSite::HcPre) | bit(NoPdlSite::GateUp));
  EXPECT_EQ(cuda::parse_no_pdl_sites("hc_pre:qa_kv:q_b:attn:o_a:o_b:router:gate_up:down:shexp:comp:aux:sinkhorn"),
            (1u << static_cast<unsigned>(NoPdlSite::Count)) - 1);
  for (const char* bad : {"nope", "q_b:", "q_b::down", "Q_B"}) {
    try {
      cuda::parse_no_pdl_sites(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("DS4_CUDA_NO_PDL: unknown site"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("(sites: hc_pre, qa_kv, q_b, attn, o_a, o_b, router, gate_up, down, shexp, comp, aux, sinkhorn)"),
                std::string::npos)
          << e.what();
    }
  }
}

// The weight upload reports progress once per layer, in order, ending at the layer count (what
// ds4's "upload to GPU" progress bar draws).
TEST_F(CudaVsCpu, UploadReportsProgressPerLayer) {
  open("q2");
  if (IsSkipped()) return;
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  auto b = cuda::make_cuda_backend(engine_->config(), engine_->weights(),
                                   {.device = 0, .progress = [&](uint64_t d, uint64_t t) { calls.emplace_back(d, t); }});
  const uint64_t n = engine_->config().n_layer;
  ASSERT_EQ(calls.size(), n);
  for (uint64_t i = 0; i < n; ++i) EXPECT_EQ(calls[i], std::make_pair(i + 1, n));
}

// DS4_CUDA_PROFILE=1 (the per-operation step profile): the same logits as graph replay, and a
// report on stderr when the session ends that names the step's operations and counts the steps.
TEST_F(CudaVsCpu, StepProfileKeepsResultsAndReportsEveryOperation) {
  open("q2");
  if (IsSkipped()) return;
  const auto prompt = prompt_tokens(40, engine_->config().n_vocab);
  std::vector<float> a(V_), b(V_);
  gpu_->new_session(128)->eval(prompt, 0, a, {});
  setenv("DS4_CUDA_PROFILE", "1", 1);
  testing::internal::CaptureStderr();
  {
    auto profiled = gpu_->new_session(128);
    unsetenv("DS4_CUDA_PROFILE");
    profiled->eval(prompt, 0, b, {});
  }
  const std::string report = testing::internal::GetCapturedStderr();
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), V_ * sizeof(float)));
  EXPECT_NE(report.find("ds4 CUDA step profile: 40 steps"), std::string::npos) << report;
  for (const char* op : {"hc_pre norm+fn matvec", "attn_q_a+kv matvecs", "attention (ratio 4)",
                         "ffn_gate+up_exps matvecs", "moe combine+hc_post", "output (head)"})
    EXPECT_NE(report.find(op), std::string::npos) << op << "\n" << report;
}

// A synthetic model generated in device memory (the ds4-bench --synthetic path) on the tiny
// shapes: finite logits of moderate size, deterministic per seed, different across seeds, and
// a clear error when the plan exceeds the --gpu-vram cap.
TEST(CudaSynthetic, TinyModelIsDeterministicFiniteAndPlanned) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  synth::SyntheticSpec spec{"tiny-q2", model::Config::tiny(512), model::Recipe::q2};
  auto logits_of = [&](uint64_t seed) {
    auto b = cuda::make_synthetic_backend(spec, {.device = 0, .seed = seed, .ctx = 128});
    auto s = b->new_session(128);
    const auto prompt = prompt_tokens(80, 512);
    std::vector<float> l(512);
    s->eval(prompt, 0, l, {});
    return l;
  };
  const std::vector<float> a = logits_of(1), b = logits_of(1), c = logits_of(2);
  double ss = 0;
  for (float v : a) {
    ASSERT_TRUE(std::isfinite(v));
    ss += static_cast<double>(v) * v;
  }
  const double rms = std::sqrt(ss / a.size());
  EXPECT_GT(rms, 1e-3);
  EXPECT_LT(rms, 1e3);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  EXPECT_NE(0, std::memcmp(a.data(), c.data(), a.size() * sizeof(float)));
  try {
    cuda::make_synthetic_backend(spec, {.device = 0, .seed = 1, .ctx = 128, .gpu_vram_gib = 1e-4});
    FAIL() << "expected ds4::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("synthetic tiny-q2 does not fit in GPU memory"), std::string::npos) << e.what();
  }
}

// Indexers the CUDA scores kernel does not take (more than kMaxIndexerHeads heads, head dims
// outside kMinIndexerDim..kMaxIndexerDim) are refused when the session is made, with the
// limits in the message, not at the first ratio-4 step.
TEST(CudaSynthetic, IndexerShapesOutsideTheKernelAreRefused) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const std::pair<uint32_t, uint32_t> shapes[] = {{cuda::kMaxIndexerHeads + 1, 32}, {4, 2 * cuda::kMaxIndexerDim}};
  for (const auto& [heads, dim] : shapes) {
    model::Config c = model::Config::tiny(512);
    c.n_indexer_head = heads;
    c.indexer_head_dim = dim;
    synth::SyntheticSpec spec{"tiny-q2", c, model::Recipe::q2};
    try {
      auto b = cuda::make_synthetic_backend(spec, {.device = 0, .seed = 1, .ctx = 128});
      auto s = b->new_session(128);
      FAIL() << heads << " x " << dim << ": expected ds4::Error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(fmt::format("an indexer of {} heads x {} values is outside the supported", heads, dim)),
                std::string::npos)
          << msg;
    }
  }
}

// The CUDA backend hands the front ends its batched prefill's chunk (2048 tokens unless
// DS4_CUDA_BATCH says otherwise), so a CLI or server prompt is not cut into 256-token batches.
TEST(CudaBackendChunk, PrefillChunkIsTheBatch) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA backend tests skipped";
  const auto path = model_path("q2");
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  const char* env = std::getenv("DS4_CUDA_BATCH");
  const int64_t want = env ? std::max(1, std::atoi(env)) : 2048;
  EXPECT_EQ(Engine::open({.model_path = path, .backend = "cuda", .threads = 1})->prefill_chunk(), want);
  EXPECT_EQ(Engine::open({.model_path = path, .backend = "cpu", .threads = 1})->prefill_chunk(), 256);
}

TEST(CudaNoDevice, OpenFailsClearlyWithoutDevice) {
  if (have_device()) GTEST_SKIP() << "a CUDA device is present";
  const auto path = model_path("q2");
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  try {
    Engine::open({.model_path = path, .backend = "cuda", .threads = 1});
    FAIL() << "expected ds4::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
  // auto falls back to the CPU backend.
  EXPECT_EQ(Engine::open({.model_path = path, .backend = "auto", .threads = 1})->backend().name(), "cpu");
}

}  // namespace
}  // namespace ds4
