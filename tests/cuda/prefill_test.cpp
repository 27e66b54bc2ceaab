// Layer-major prefill (issue #6): the multi-token matvec ("matmat") against single-token matvecs
// bit for bit for every weight type and each of its modes (dense, grouped inputs, experts by
// list), and the batched CudaForward::eval against token-by-token evaluation on the tiny f32,
// q2 and q4 models: logits at every chunk end and the exported state after the prompt are
// bit-identical for chunk sizes 1, 3, 17, 64 and the whole 300-token prompt (crossing the
// ratio-4 and ratio-128 compressor emits, the ring wrap of the 16-token window, and the
// indexer's top-k switch-on at position 35), with every logit row (all_logits) and with
// chunks split further inside one eval (DS4_CUDA_BATCH=5). Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/kernels.h"
#include "common/ggml_type.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "model/kv_state.h"
#include "quant/quant.h"

namespace ds4 {
namespace {

bool have_device() { return cuda::device_count() > 0; }

// A rows x cols matrix of `type` from seeded normal values (quant::quantize_row).
std::vector<uint8_t> random_matrix(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t rb = quant::row_bytes(type, cols);
  std::vector<uint8_t> w(rb * rows);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = 0.05f * nd(rng);
    quant::quantize_row(type, row.data(), &w[r * rb], cols);
  }
  return w;
}

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = 2.0f * nd(rng);
  return v;
}

template <typename T>
std::vector<T> down(const cuda::DeviceArray<T>& d) {
  cuda::check(cudaDeviceSynchronize(), "sync");
  std::vector<T> h(d.size());
  d.download(h.data(), h.size());
  return h;
}

// Grouped-input matmat (the attention output projection's form: group g of token k reads input
// row k*groups + g and weight rows g*R ..; y[k][g*R + r]) against per-token matvec launches, bit
// for bit. x holds n * groups rows of cols floats; act / act1 are the quantized-activation
// scratch for n * groups and groups rows.
void expect_grouped_matmat_equals_matvecs(const cuda::DevMatrix& w, int64_t R, int groups, int n, const float* x,
                                          int64_t cols, uint8_t* act, uint8_t* act1, const std::string& what) {
  cuda::DeviceArray<float> y(static_cast<size_t>(n) * groups * R), ref(static_cast<size_t>(n) * groups * R);
  cuda::matmat(cuda::grouped_matmat_op(w, R, groups, n, x, cols, y.get(), groups * R, act));
  for (int k = 0; k < n; ++k)
    cuda::matvec(w, 0, R, R, nullptr, groups, x + k * groups * cols, cols, ref.get() + k * groups * R, R, act1);
  const auto a = down(y), b = down(ref);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << what << ", groups " << groups;
}

// Dense, grouped-input and expert-list matmat against per-token matvec launches, every weight
// type, 45 tokens (two passes of 32), rows not a multiple of the block's 8 and columns ending in
// a partial staging chunk (4864: 19 super-blocks) or in whole K tiles of 4 super-blocks (4096:
// the staged (predecode) expert-list kernel, with ~27 tokens per expert, or 117 tokens per
// expert: passes of up to 48 or 64 tokens, the last partial; 42-76 tokens per expert (130 or
// 160 tokens, 2 of 5 experts each), on both sides of 48 and 64, the limits of
// DS4_CUDA_PREDECODE_SPLIT's two launches, 64 itself included; and 40 or 100 rows per expert:
// blocks of 64 or 128 rows with partly or wholly idle warps).
TEST(CudaMatmat, EqualsSingleTokenMatvecsBitForBit) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  cuda::prepare_device(0);
  const int n = 45, U = 3, E = 5, G = 3;
  const int kNe = 117, kInMax = std::max({n * U, 2 * kNe, 160 * 2});  // the expert cases (below)
  const int64_t R = 77, FF_max = 100;
  for (const int64_t cols : {int64_t{4864}, int64_t{4096}})
  for (const GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::MXFP4,
                              GgmlType::Q2_K, GgmlType::Q4_K, GgmlType::IQ2_XXS}) {
    SCOPED_TRACE(static_cast<int>(type));
    SCOPED_TRACE(cols);
    const auto t = static_cast<uint32_t>(type);
    const int64_t rows = std::max<int64_t>(R * G, E * FF_max);
    const auto wh = random_matrix(type, rows, cols, 3 + t);
    cuda::DeviceArray<uint8_t> wd(wh.size());
    wd.upload(wh.data(), wh.size());
    const cuda::DevMatrix w{t, wd.get(), cols, rows, quant::row_bytes(type, cols)};
    cuda::to_device_layout(w);  // the kernels' row layout, as DeviceWeights uploads it
    const auto xh = random_vec(static_cast<size_t>(kInMax) * cols, 11 + t);
    cuda::DeviceArray<float> x(xh.size());
    x.upload(xh.data(), xh.size());
    cuda::DeviceArray<uint8_t> act(cuda::act_row_bytes(t, cols) * kInMax + 64);
    cuda::DeviceArray<uint8_t> act1(cuda::act_row_bytes(t, cols) * U + 64);

    // Dense: y[t][r] for one shared weight.
    {
      cuda::DeviceArray<float> y(static_cast<size_t>(n) * R), ref(static_cast<size_t>(n) * R);
      cuda::MatmatOp o;
      o.w = &w;
      o.n_rows = R;
      o.n_tok = n;
      o.x = x.get();
      o.x_stride = cols;
      o.n_in = n;
      o.y = y.get();
      o.y_stride = R;
      o.act = act.get();
      cuda::matmat(o);
      for (int k = 0; k < n; ++k)
        cuda::matvec(w, 0, R, 0, nullptr, 1, x.get() + k * cols, 0, ref.get() + k * R, 0, act1.get());
      const auto a = down(y), b = down(ref);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "dense";
    }
    // Grouped inputs (the attention output projection).
    expect_grouped_matmat_equals_matvecs(w, R, G, n, x.get(), cols, act.get(), act1.get(), "grouped");
    // Experts by list: token k's slots select U distinct experts of E; entry k*U + s. The second
    // case gives each of 2 experts all 117 tokens: several passes of the predecode kernel (the
    // last partial). The last two give 5 experts 42-62 and 52-76 tokens (counts per in_div:
    // 130 tokens 62 42 46 59 51 / 56 44 55 54 51, 160 tokens 76 52 62 66 64 / 67 62 66 63 62).
    struct ExpertCase {
      int n, U, E;
    };
    for (const ExpertCase ec : {ExpertCase{n, U, E}, ExpertCase{kNe, 2, 2}, ExpertCase{130, 2, 5}, ExpertCase{160, 2, 5}})
    for (const int64_t FF : {int64_t{40}, FF_max})
    for (const int in_div : {ec.U, 1}) {  // gate/up (input shared per token) and down (per slot)
      SCOPED_TRACE(ec.n);
      std::vector<int32_t> sel(static_cast<size_t>(ec.n) * ec.U);
      std::mt19937 rng(5 + in_div);
      for (int k = 0; k < ec.n; ++k) {
        std::vector<int32_t> ids(ec.E);
        for (int e = 0; e < ec.E; ++e) ids[e] = e;
        std::shuffle(ids.begin(), ids.end(), rng);
        for (int s = 0; s < ec.U; ++s) sel[k * ec.U + s] = ids[s];
      }
      cuda::DeviceArray<int32_t> sd(sel.size()), cnt(ec.E), list(static_cast<size_t>(ec.E) * ec.n * ec.U);
      sd.upload(sel.data(), sel.size());
      cuda::group_by_expert(sd.get(), ec.n * ec.U, ec.E, cnt.get(), list.get(), ec.n * ec.U);
      cuda::DeviceArray<float> y(static_cast<size_t>(ec.n) * ec.U * FF), ref(static_cast<size_t>(ec.n) * ec.U * FF);
      cuda::MatmatOp o;
      o.w = &w;
      o.n_rows = o.group_rows = FF;
      o.groups = ec.E;
      o.cnt = cnt.get();
      o.list = list.get();
      o.list_stride = ec.n * ec.U;
      o.in_div = in_div;
      o.x = x.get();
      o.x_stride = cols;
      o.n_in = in_div == 1 ? ec.n * ec.U : ec.n;
      o.y = y.get();
      o.y_stride = FF;
      o.act = act.get();
      cuda::matmat(o);
      for (int k = 0; k < ec.n; ++k) {
        const float* xk = x.get() + (in_div == 1 ? k * ec.U * cols : k * cols);
        cuda::matvec(w, 0, FF, FF, sd.get() + k * ec.U, ec.U, xk, in_div == 1 ? cols : 0, ref.get() + k * ec.U * FF, FF,
                     act1.get());
      }
      const auto a = down(y), b = down(ref);
      const auto c = down(cnt);
      int total = 0;
      for (int v : c) total += v;
      EXPECT_EQ(total, ec.n * ec.U);
      if (ec.n >= 130) {  // experts on both sides of the split's classes (49..64 tokens and the rest)
        EXPECT_TRUE(std::any_of(c.begin(), c.end(), [](int v) { return v > 48 && v <= 64; }));
        EXPECT_TRUE(std::any_of(c.begin(), c.end(), [](int v) { return v <= 48 || v > 64; }));
      }
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "experts, in_div " << in_div << ", FF " << FF;
    }
  }
  // Dense Q8_0 and float formats over several tiles of the tiled kernels (Q8_0 64 rows x 64
  // tokens, 19 K tiles of 256 values; float 32 x 32 in 64-column chunks), the last of each tile
  // partial (200 rows, 150 tokens), dense and with 2 grouped inputs; the float formats also with
  // a last chunk of 16 (4880) or 48 (4912) columns.
  struct TileCase {
    GgmlType type;
    int64_t cols;
  };
  std::vector<TileCase> tile_cases{{GgmlType::Q8_0, 4864}};
  for (const int64_t c : {int64_t{4864}, int64_t{4880}, int64_t{4912}})
    for (const GgmlType ty : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) tile_cases.push_back({ty, c});
  for (const auto& [type, cols] : tile_cases) {
    SCOPED_TRACE(static_cast<int>(type));
    SCOPED_TRACE(cols);
    const int n2 = 150, G2 = 2;
    const int64_t R2 = 200;
    const auto t = static_cast<uint32_t>(type);
    const auto wh = random_matrix(type, R2 * G2, cols, 41 + t);
    cuda::DeviceArray<uint8_t> wd(wh.size());
    wd.upload(wh.data(), wh.size());
    const cuda::DevMatrix w{t, wd.get(), cols, R2 * G2, quant::row_bytes(type, cols)};
    cuda::to_device_layout(w);
    const auto xh = random_vec(static_cast<size_t>(n2) * G2 * cols, 43 + t);
    cuda::DeviceArray<float> x(xh.size());
    x.upload(xh.data(), xh.size());
    cuda::DeviceArray<uint8_t> act(cuda::act_row_bytes(t, cols) * n2 * G2 + 64);
    cuda::DeviceArray<uint8_t> act1(cuda::act_row_bytes(t, cols) * G2 + 64);
    for (const int groups : {1, G2})
      expect_grouped_matmat_equals_matvecs(w, R2, groups, n2, x.get(), cols, act.get(), act1.get(), "dense tiles");
  }
}

// Every field of two states, bit for bit.
void expect_states_equal(const model::KvState& a, const model::KvState& b, const std::string& what) {
  ASSERT_EQ(a.layers().size(), b.layers().size());
  for (size_t il = 0; il < a.layers().size(); ++il) {
    const model::LayerKv& x = a.layers()[il];
    const model::LayerKv& y = b.layers()[il];
    SCOPED_TRACE(what + " layer " + std::to_string(il));
    EXPECT_EQ(x.raw, y.raw);
    if (!x.ratio) continue;
    EXPECT_EQ(x.comp, y.comp);
    EXPECT_EQ(x.comp_state->n_tokens(), y.comp_state->n_tokens());
    EXPECT_TRUE(std::ranges::equal(x.comp_state->state_kv(), y.comp_state->state_kv()));
    EXPECT_TRUE(std::ranges::equal(x.comp_state->state_score(), y.comp_state->state_score()));
    if (x.ratio != 4) continue;
    EXPECT_EQ(x.index, y.index);
    EXPECT_EQ(x.index_state->n_tokens(), y.index_state->n_tokens());
    EXPECT_TRUE(std::ranges::equal(x.index_state->state_kv(), y.index_state->state_kv()));
    EXPECT_TRUE(std::ranges::equal(x.index_state->state_score(), y.index_state->state_score()));
  }
}

TEST(CudaPrefill, ChunkedPrefillIsBitIdenticalToTokenByToken) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA backend tests skipped";
  for (const char* recipe : {"f32", "q2", "q4"}) {
    SCOPED_TRACE(recipe);
    const auto path = test::tiny_model_path(recipe);
    ASSERT_TRUE(std::filesystem::exists(path)) << path << " (built by the ds4_models target)";
    auto engine = Engine::open({.model_path = path, .backend = "cpu", .threads = 1});
    auto gpu = cuda::make_cuda_backend(engine->config(), engine->weights());
    const size_t V = engine->config().n_vocab;
    const int64_t ctx = 512, L = 300;
    const auto prompt = test::prompt_tokens(L, engine->config().n_vocab, 24680);
    // Reference: one token per eval (the decode step).
    auto ref = gpu->new_session(ctx);
    std::vector<float> want(static_cast<size_t>(L) * V);
    for (int64_t p = 0; p < L; ++p)
      ref->eval({&prompt[p], 1}, p, {&want[p * V], V}, {});
    model::KvState want_state(engine->config(), ctx);
    ref->export_state(want_state);
    for (const int64_t chunk : {int64_t{1}, int64_t{3}, int64_t{17}, int64_t{64}, L}) {
      auto s = gpu->new_session(ctx);
      std::vector<float> l(V);
      for (int64_t p = 0; p < L; p += chunk) {
        const int64_t m = std::min(chunk, L - p);
        s->eval({&prompt[p], static_cast<size_t>(m)}, p, l, {});
        ASSERT_EQ(0, std::memcmp(l.data(), &want[(p + m - 1) * V], V * sizeof(float)))
            << "chunk " << chunk << ": logits at position " << p + m - 1;
      }
      model::KvState st(engine->config(), ctx);
      s->export_state(st);
      expect_states_equal(st, want_state, "chunk " + std::to_string(chunk));
    }
    // Every row of the logits in one eval, and chunks split inside one eval.
    {
      auto s = gpu->new_session(ctx);
      std::vector<float> all(static_cast<size_t>(L) * V), last(V);
      s->eval(prompt, 0, last, all);
      EXPECT_EQ(0, std::memcmp(all.data(), want.data(), all.size() * sizeof(float))) << "all_logits";
      EXPECT_EQ(0, std::memcmp(last.data(), &want[(L - 1) * V], V * sizeof(float)));
    }
    {
      setenv("DS4_CUDA_BATCH", "5", 1);
      auto s = gpu->new_session(ctx);
      unsetenv("DS4_CUDA_BATCH");
      std::vector<float> l(V);
      s->eval({prompt.data(), 200}, 0, l, {});
      s->eval({prompt.data() + 200, 100}, 200, l, {});
      EXPECT_EQ(0, std::memcmp(l.data(), &want[(L - 1) * V], V * sizeof(float))) << "DS4_CUDA_BATCH=5";
      model::KvState st(engine->config(), ctx);
      s->export_state(st);
      expect_states_equal(st, want_state, "DS4_CUDA_BATCH=5");
    }
  }
}

}  // namespace
}  // namespace ds4
