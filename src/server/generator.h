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
#include "engine/sampler.h"
#include "engine/session.h"
#include "tokenizer/stream_decoder.h"

namespace ds4::server {

/// Thrown by a Generator's `tick` callback to abandon a prefill (client gone, shutdown).
struct Cancelled {};

/// One generation step's output.
struct GenStep {
  bool eos = false;   ///< the end-of-sentence token was sampled (no text)
  std::string text;   ///< complete UTF-8 characters that became available (may be empty)
};

/// A source of generated text. Used by one thread at a time (the core's worker).
class Generator {
 public:
  virtual ~Generator() = default;
  /// Makes the state hold exactly `prompt` (tokens, shorter than ctx), reusing what it can and
  /// always evaluating at least one token; returns the number of reused prompt tokens. Calls
  /// `tick` between prefill chunks; `tick` may throw Cancelled, which propagates.
  virtual int64_t prepare(std::span<const int32_t> prompt, const std::function<void()>& tick) = 0;
  /// Samples the next token with `sampler` and returns its text.
  virtual GenStep next(Sampler& sampler) = 0;
  /// Ends the turn: returns held-back bytes of an incomplete character (as U+FFFD) or "".
  virtual std::string flush() = 0;
  /// Context tokens left for generation.
  virtual int64_t remaining() const = 0;
  /// Forgets the live state (after a stop-string hit the sampled tail is not a clean prefix).
  virtual void invalidate() = 0;
};

/// The real generator: one ds4::Session of `ctx` tokens on the engine's backend. A sampled token
/// is evaluated lazily (at the next step), so a turn that ends never pays for an unused decode.
class ModelGenerator final : public Generator {
 public:
  /// Allocates the session. Throws ds4::Error when it cannot be allocated or the vocabulary has
  /// no end-of-sentence token.
  ModelGenerator(Engine& engine, int64_t ctx, int64_t prefill_chunk = 256);

  int64_t prepare(std::span<const int32_t> prompt, const std::function<void()>& tick) override;
  GenStep next(Sampler& sampler) override;
  std::string flush() override;
  int64_t remaining() const override;
  void invalidate() override;

  Session& session() { return session_; }

 private:
  Engine& engine_;
  Session session_;
  int64_t chunk_;
  int32_t eos_;
  std::optional<int32_t> pending_;  // sampled, not yet evaluated
  tok::StreamDecoder decoder_;
};

/// Test generator: replays `pieces` as the text of successive tokens, then EOS (or runs out
/// with `eos_at_end == false`, producing empty steps). `reuse` is what prepare() reports:
/// the common prefix with the previous prompt, at least one token re-evaluated, like Session.
class ScriptedGenerator final : public Generator {
 public:
  ScriptedGenerator(std::vector<std::string> pieces, int64_t ctx, bool eos_at_end = true);
  int64_t prepare(std::span<const int32_t> prompt, const std::function<void()>& tick) override;
  GenStep next(Sampler& sampler) override;
  std::string flush() override { return {}; }
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
};

}  // namespace ds4::server
