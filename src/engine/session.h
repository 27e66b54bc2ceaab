// A generation session: the tokens consumed so far, the next-token logits and the backend's
// KV state (spec §4). Prefill in chunks of any size gives the same logits as decoding token by
// token; snapshots use the DSV4 payload layout of product-surface §4.2 / spec §4.3.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/backend.h"
#include "model/config.h"
#include "model/kv_state.h"

namespace ds4 {

/// Progress callback: (tokens done, tokens total) during prefill.
using ProgressFn = std::function<void(int64_t, int64_t)>;

class Session {
 public:
  /// An empty session of `ctx` tokens on `backend`. Throws ds4::Error when it cannot be
  /// allocated.
  Session(const model::Config& config, Backend& backend, int64_t ctx);

  /// Appends `tokens` and evaluates them in chunks of `chunk` tokens (0 = all at once).
  /// Throws ds4::Error when the total would reach ctx (prompts must be shorter than ctx).
  void prefill(std::span<const int32_t> tokens, int64_t chunk = 0, const ProgressFn& progress = {});
  /// Appends `tokens` like prefill() and hands every token's next-token logits to
  /// `each(i, logits)` (i = index in `tokens`, logits n_vocab f32, valid during the call);
  /// teacher-forced scoring (`ds4 --perplexity-file`). Same errors as prefill().
  void prefill_each(std::span<const int32_t> tokens, int64_t chunk,
                    const std::function<void(int64_t, std::span<const float>)>& each);
  /// Appends one token (decode step).
  void decode(int32_t token) { prefill(std::span<const int32_t>(&token, 1)); }
  /// Makes the session hold exactly `prompt`, reusing the longest common token prefix (at least
  /// one token is always re-evaluated so the logits are fresh). Returns how many leading tokens
  /// were kept without being evaluated again: the common prefix when the session only grows,
  /// the rewind checkpoint's length when it had to drop tokens and a checkpoint covered the
  /// prefix, else 0. With checkpointing on, the state before the prompt's last token becomes
  /// the new rewind checkpoint.
  int64_t sync(std::span<const int32_t> prompt, int64_t chunk = 0, const ProgressFn& progress = {});
  /// Truncates to the first n tokens: restores the rewind checkpoint when it lies within them
  /// and evaluates the rest, else re-evaluates from the start (exact either way). Returns the
  /// tokens kept without evaluation (as sync). The logits are empty when nothing was evaluated.
  int64_t rewind(int64_t n, int64_t chunk = 0);
  /// Forgets everything (the checkpoint too).
  void reset();
  /// Turns the rewind checkpoint on or off (off by default). A checkpoint is a host copy of
  /// the backend state (BackendSession::export_state, about KvState::estimate bytes), taken by
  /// sync() one token before the end of each prompt, so a next request that drops generated
  /// tokens (a chat follow-up that re-renders the answer differently) resumes from the prompt
  /// instead of from token 0. Used by ds4-server's live session.
  void set_checkpointing(bool on);
  /// Tokens covered by the rewind checkpoint (0 when there is none).
  int64_t checkpoint_tokens() const { return checkpoint_ ? checkpoint_tokens_ : 0; }

  /// Logits for the next token (n_vocab f32); empty before the first token.
  std::span<const float> logits() const;
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int64_t ctx() const { return ctx_; }
  int64_t remaining() const { return ctx_ - static_cast<int64_t>(tokens_.size()); }

  /// Serialises tokens, logits and KV state as a DSV4 payload (spec §4.3), little-endian.
  std::vector<uint8_t> save() const;
  /// Restores a payload written by save() (or by ds4 for the same model shape). Throws
  /// ds4::Error naming the field on a bad magic/version, a mismatched model shape, a context
  /// too small for the saved tokens, or a truncated payload; the session is unchanged then.
  void load(std::span<const uint8_t> payload);

 private:
  const model::Config& config_;
  int64_t ctx_;
  std::unique_ptr<BackendSession> backend_;
  std::vector<int32_t> tokens_;
  std::vector<float> logits_;
  bool have_logits_ = false;
  bool checkpointing_ = false;
  std::unique_ptr<model::KvState> checkpoint_;  // state after tokens_[0, checkpoint_tokens_)
  int64_t checkpoint_tokens_ = 0;
};

}  // namespace ds4
