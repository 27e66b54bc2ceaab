// The token source the server core drives: the live model session in the server binary, a fixed
// script of text pieces in the core's unit tests (so tool-call parsing and thinking splitting can
// be tested end to end although the tiny test model's weights are random).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/kv_disk_cache.h"
#include "server/prefix_reuse.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "tokenizer/stream_decoder.h"

namespace ds4::server {

/// Thrown by a Generator's `tick` callback to abandon a prefill (client gone, shutdown).
struct Cancelled {};

/// What prepare() did.
struct Prepared {
  int64_t prompt_tokens = 0;  ///< tokens of the prompt as evaluated (the plan's tokens)
  int64_t reused = 0;         ///< of those, tokens taken from the live session or a disk snapshot
  ReuseStep step = ReuseStep::none;
  bool disk_hit = false;      ///< the prefix came from the disk cache
};

/// One generation step's output.
struct GenStep {
  bool eos = false;   ///< the end-of-sentence token was sampled (no text)
  std::string text;   ///< complete UTF-8 characters that became available (may be empty)
};

/// A source of generated text. Used by one thread at a time (the core's worker).
class Generator {
 public:
  virtual ~Generator() = default;
  /// Makes the state hold `prompt` (tokens of `prompt_text`, shorter than ctx), reusing what it
  /// can (prefix_reuse.h: the live tokens may stand for the start of the text) and always
  /// evaluating at least one token. Calls `tick` between prefill chunks; `tick` may throw
  /// Cancelled, which propagates. `reused` counts only tokens that were not evaluated again.
  virtual Prepared prepare(std::span<const int32_t> prompt, std::string_view prompt_text,
                           const std::function<void()>& tick) = 0;
  /// The turn just generated ended with EOS after closed reasoning: `visible_text` is the
  /// thinking-visible key of the live frontier (prefix_reuse.h VisibleAlias). Default: ignored.
  virtual void remember_visible(std::string visible_text) { (void)visible_text; }
  /// Samples the next token with `sampler` and returns its text.
  virtual GenStep next(Sampler& sampler) = 0;
  /// Ends the turn: returns held-back bytes of an incomplete character (as U+FFFD) or "".
  virtual std::string flush() = 0;
  /// Context tokens left for generation.
  virtual int64_t remaining() const = 0;
  /// Forgets the live state (after a stop-string hit the sampled tail is not a clean prefix).
  virtual void invalidate() = 0;
  /// Called once after the last job (graceful shutdown): persist what is worth keeping.
  virtual void on_shutdown() {}
  /// Called between generated tokens outside tool calls: a chance for a continued save (§4.3).
  virtual void checkpoint() {}
};

/// Disk-cache placement knobs of ModelGenerator (ds4-server --kv-cache-* flags, §3.9).
struct KvPlacement {
  int64_t cold_max_tokens = 30000;  ///< cold-save prompts of length [min, this]; 0 disables
  int64_t trim_tokens = 32;         ///< tail trimmed before a cold save
  int64_t align_tokens = 2048;      ///< save boundary alignment; 0 disables
  int64_t continued_tokens = 10000; ///< continued-save interval (rounded up to align); 0 disables
};

/// The continued-save step (§4.3): `interval` rounded up to a multiple of `align` (10000 with
/// align 2048 -> 10240); 0 when interval is 0.
int64_t continued_save_step(int64_t interval, int64_t align);

/// The real generator: one ds4::Session of `ctx` tokens on the engine's backend. A sampled token
/// is evaluated lazily (at the next step), so a turn that ends never pays for an unused decode.
/// With a disk cache (product-surface §3.9 steps 4, 7, 8): a prompt whose live common prefix is
/// shorter than the cache's min tokens first saves the live session (reason evict), then loads
/// the longest cached prefix of the prompt text (only the remaining text is tokenized), or, on a
/// miss, cold-saves the prompt's save point before prefilling the rest. on_shutdown() saves the
/// live session (reason shutdown).
class ModelGenerator final : public Generator {
 public:
  /// Allocates the session. Throws ds4::Error when it cannot be allocated or the vocabulary has
  /// no end-of-sentence token. `cache` (may be null) must outlive the generator.
  ModelGenerator(Engine& engine, int64_t ctx, int64_t prefill_chunk = Backend::kDefaultPrefillChunk,
                 KvDiskCache* cache = nullptr, KvPlacement placement = {},
                 ToolMemory* tools = nullptr);

  Prepared prepare(std::span<const int32_t> prompt, std::string_view prompt_text,
                   const std::function<void()>& tick) override;
  void remember_visible(std::string visible_text) override;
  void checkpoint() override;
  GenStep next(Sampler& sampler) override;
  std::string flush() override;
  int64_t remaining() const override;
  void invalidate() override;
  void on_shutdown() override;

  Session& session() { return session_; }

  /// The cold-save point of `prompt` (§3.9): the last User token before the first Assistant
  /// token when that is >= min_tokens, else (length - trim) aligned down to `align`; 0 when
  /// neither is >= min_tokens.
  static int64_t cold_save_point(std::span<const int32_t> prompt, int32_t user_id,
                                 int32_t assistant_id, int64_t min_tokens, const KvPlacement& p);

 private:
  void save_live(SaveReason reason);
  /// Prefills `tokens` (extending the live ones), stopping at each continued-save boundary.
  /// Session::sync with continued saves on the way; returns the tokens kept without evaluation
  /// (the first sync's answer: the later ones only extend).
  int64_t sync_with_saves(std::span<const int32_t> tokens, const ProgressFn& progress);

  Engine& engine_;
  Session session_;
  int64_t chunk_;
  int32_t eos_;
  KvDiskCache* cache_;
  KvPlacement placement_;
  ToolMemory* tools_;
  int64_t continued_step_ = 0;
  int64_t last_saved_ = 0;          // length of the last snapshot of the live session
  std::optional<int32_t> pending_;  // sampled, not yet evaluated
  bool eos_sampled_ = false;        // the last turn ended with EOS (not evaluated either)
  std::optional<VisibleAlias> alias_;
  tok::StreamDecoder decoder_;
};

/// Test generator: replays `pieces` as the text of successive tokens, then EOS (or runs out
/// with `eos_at_end == false`, producing empty steps). `reuse` is what prepare() reports:
/// the common prefix with the previous prompt, at least one token re-evaluated, like Session.
class ScriptedGenerator final : public Generator {
 public:
  ScriptedGenerator(std::vector<std::string> pieces, int64_t ctx, bool eos_at_end = true);
  Prepared prepare(std::span<const int32_t> prompt, std::string_view prompt_text,
                   const std::function<void()>& tick) override;
  GenStep next(Sampler& sampler) override;
  std::string flush() override { return {}; }
  /// The text of the last prepared prompt.
  const std::string& last_prompt_text() const { return last_text_; }
  /// Records the key (tests compare it with the next request's rendering).
  void remember_visible(std::string visible_text) override { visible_ = std::move(visible_text); }
  /// The last thinking-visible key the core reported ("" if none).
  const std::string& last_visible() const { return visible_; }
  /// The sampler temperature of every step of the last job.
  const std::vector<float>& temperatures() const { return temperatures_; }
  int64_t remaining() const override { return ctx_ - used_; }
  void invalidate() override { live_.clear(); }
  /// Replaces the script (the next prepare() starts it from the beginning).
  void set_script(std::vector<std::string> pieces) { pieces_ = std::move(pieces); }

 private:
  std::vector<std::string> pieces_;
  size_t at_ = 0;
  int64_t ctx_;
  int64_t used_ = 0;
  bool eos_at_end_;
  std::vector<int32_t> live_;
  std::string last_text_;
  std::vector<float> temperatures_;
  std::string visible_;
};

}  // namespace ds4::server
