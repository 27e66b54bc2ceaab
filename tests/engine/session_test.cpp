// Sessions on the generated tiny models (tools/make-model, f32 and q2 recipes): prefill in
// chunks of any size equals token-by-token decode; snapshot -> restore -> continue equals an
// uninterrupted run; rewind and sync reuse prefixes correctly; bad payloads are rejected.
#include "engine/session.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "common/error.h"
#include "engine/engine.h"

namespace ds4 {
namespace {

std::string model_path(const char* recipe) {
  return std::string(DS4_BINARY_DIR) + "/models/ds4-tiny-" + recipe + ".gguf";
}

/// A deterministic pseudo-random prompt of n token ids below `vocab` (ids of real text matter
/// less here than covering every position).
std::vector<int32_t> prompt_tokens(size_t n, uint32_t vocab) {
  std::vector<int32_t> t(n);
  uint64_t s = 12345;
  for (auto& x : t) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<int32_t>((s >> 33) % vocab);
  }
  return t;
}

double max_rel_diff(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return num / std::max(den, 1e-30);
}

class SessionTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const auto path = model_path(GetParam());
    ASSERT_TRUE(std::filesystem::exists(path)) << path << " (built by the ds4_models target)";
    engine_ = Engine::open({.model_path = path, .backend = "cpu", .threads = 1});  // ctest runs tests in parallel
  }
  std::unique_ptr<Engine> engine_;
};

TEST_P(SessionTest, ChunkedPrefillEqualsTokenByTokenDecode) {
  const auto& cfg = engine_->config();
  const auto prompt = prompt_tokens(600, cfg.n_vocab);  // ratio-4 rows exceed top-k; ratio-128 emits
  Session ref(cfg, engine_->backend(), 1024);
  std::vector<std::vector<float>> ref_logits;  // after 1, 300, 600 tokens
  for (size_t i = 0; i < prompt.size(); ++i) {
    ref.decode(prompt[i]);
    if (i + 1 == 1 || i + 1 == 300 || i + 1 == 600)
      ref_logits.emplace_back(ref.logits().begin(), ref.logits().end());
  }
  for (int64_t chunk : {2, 3, 4, 5, 127, 128, 129, 4096, 0}) {
    Session s(cfg, engine_->backend(), 1024);
    s.prefill(std::span(prompt).first(1), chunk);
    EXPECT_LE(max_rel_diff(s.logits(), ref_logits[0]), 1e-5) << "chunk " << chunk << " at 1";
    s.prefill(std::span(prompt).subspan(1, 299), chunk);
    EXPECT_LE(max_rel_diff(s.logits(), ref_logits[1]), 1e-5) << "chunk " << chunk << " at 300";
    s.prefill(std::span(prompt).subspan(300), chunk);
    EXPECT_LE(max_rel_diff(s.logits(), ref_logits[2]), 1e-5) << "chunk " << chunk << " at 600";
  }
}

TEST_P(SessionTest, SnapshotRestoreContinueEqualsUninterrupted) {
  const auto& cfg = engine_->config();
  const auto prompt = prompt_tokens(300, cfg.n_vocab);
  Session a(cfg, engine_->backend(), 512);
  a.prefill(std::span(prompt).first(261), 64);  // 261: mid ratio-4 window and mid ratio-128 window
  const auto payload = a.save();
  Session b(cfg, engine_->backend(), 512);
  b.load(payload);
  EXPECT_EQ(b.tokens(), a.tokens());
  EXPECT_EQ(max_rel_diff(b.logits(), a.logits()), 0.0);
  a.prefill(std::span(prompt).subspan(261), 7);
  b.prefill(std::span(prompt).subspan(261), 39);
  EXPECT_EQ(max_rel_diff(b.logits(), a.logits()), 0.0);
  EXPECT_EQ(b.save(), a.save());
}

TEST_P(SessionTest, SyncReusesCommonPrefixAndRewindIsExact) {
  const auto& cfg = engine_->config();
  auto prompt = prompt_tokens(200, cfg.n_vocab);
  Session s(cfg, engine_->backend(), 512);
  EXPECT_EQ(s.sync(prompt), 0);
  const std::vector<float> full(s.logits().begin(), s.logits().end());
  // Same prompt again: the last token must be evaluated again, and without a rewind
  // checkpoint dropping it means starting over (see RewindCheckpointResumesAtThePrompt).
  EXPECT_EQ(s.sync(prompt), 0);
  EXPECT_EQ(max_rel_diff(s.logits(), full), 0.0);
  // A prompt that diverges at 150 must drop live tokens: without a checkpoint the session
  // re-evaluates from token 0 (nothing kept) and equals a fresh run.
  auto other = prompt;
  other[150] = (other[150] + 1) % static_cast<int32_t>(cfg.n_vocab);
  EXPECT_EQ(s.sync(other), 0);
  Session fresh(cfg, engine_->backend(), 512);
  fresh.prefill(other);
  EXPECT_EQ(max_rel_diff(s.logits(), fresh.logits()), 0.0);
}

// A chat follow-up: prompt, generated answer, then a prompt that keeps the first prompt but
// re-renders the answer differently. With checkpointing the session resumes from the state
// before the first prompt's last token instead of from 0, with bit-identical logits.
TEST_P(SessionTest, RewindCheckpointResumesAtThePrompt) {
  const auto& cfg = engine_->config();
  const auto all = prompt_tokens(400, cfg.n_vocab);
  const std::vector<int32_t> prompt(all.begin(), all.begin() + 200);
  Session s(cfg, engine_->backend(), 512);
  s.set_checkpointing(true);
  EXPECT_EQ(s.sync(prompt), 0);
  EXPECT_EQ(s.checkpoint_tokens(), 199);
  for (int i = 200; i < 230; ++i) s.decode(all[i]);  // "generated" tokens
  // Next prompt: the first one plus a differently rendered answer and a new user turn.
  std::vector<int32_t> next = prompt;
  next.insert(next.end(), all.begin() + 300, all.begin() + 360);
  EXPECT_EQ(s.sync(next), 199);
  EXPECT_EQ(s.checkpoint_tokens(), 259);
  Session fresh(cfg, engine_->backend(), 512);
  fresh.prefill(next);
  EXPECT_EQ(max_rel_diff(s.logits(), fresh.logits()), 0.0);
  // The identical prompt again keeps everything but the last token (the new checkpoint).
  s.decode(all[390]);
  EXPECT_EQ(s.sync(next), 259);
  EXPECT_EQ(max_rel_diff(s.logits(), fresh.logits()), 0.0);
  // Diverging before the checkpoint: back to token 0, still exact; the checkpoint moves.
  std::vector<int32_t> early(next.begin(), next.begin() + 100);
  early.push_back(all[399]);
  EXPECT_EQ(s.sync(early), 0);
  EXPECT_EQ(s.checkpoint_tokens(), 100);
  Session fresh2(cfg, engine_->backend(), 512);
  fresh2.prefill(early);
  EXPECT_EQ(max_rel_diff(s.logits(), fresh2.logits()), 0.0);
  // Restoring a snapshot drops the checkpoint (its tokens may not be a prefix any more).
  const auto payload = fresh.save();
  s.load(payload);
  EXPECT_EQ(s.checkpoint_tokens(), 0);
  // Without checkpointing nothing is kept when tokens must be dropped.
  s.set_checkpointing(false);
  EXPECT_EQ(s.sync(prompt), 0);
  EXPECT_EQ(s.checkpoint_tokens(), 0);
}

TEST_P(SessionTest, RejectsBadInput) {
  const auto& cfg = engine_->config();
  Session s(cfg, engine_->backend(), 64);
  EXPECT_THROW(s.prefill(prompt_tokens(65, cfg.n_vocab)), Error);  // over ctx
  const int32_t bad = static_cast<int32_t>(cfg.n_vocab);
  EXPECT_THROW(s.decode(bad), Error);
  EXPECT_THROW(s.decode(-1), Error);
  s.prefill(prompt_tokens(10, cfg.n_vocab));
  auto payload = s.save();
  Session t(cfg, engine_->backend(), 64);
  auto corrupt = payload;
  corrupt[0] ^= 1;
  EXPECT_THROW(t.load(corrupt), Error);
  for (size_t cut : {size_t{3}, size_t{52}, payload.size() / 2, payload.size() - 1})
    EXPECT_THROW(t.load(std::span(payload).first(cut)), Error) << "cut at " << cut;
  Session small(cfg, engine_->backend(), 8);  // too small for 10 tokens (and another window)
  EXPECT_THROW(small.load(payload), Error);
  EXPECT_TRUE(t.tokens().empty());  // failed loads leave the session unchanged
  t.load(payload);
  EXPECT_EQ(t.tokens(), s.tokens());
}

// The front ends' prompt chunk (Engine::prefill_chunk): the CPU backend keeps the default 256.
TEST_P(SessionTest, CpuPrefillChunkIsTheDefault) {
  EXPECT_EQ(engine_->prefill_chunk(), 256);
  EXPECT_EQ(engine_->prefill_chunk(), Backend::kDefaultPrefillChunk);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, SessionTest, ::testing::Values("f32", "q2", "q4"));

}  // namespace
}  // namespace ds4
