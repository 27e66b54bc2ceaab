// The small interface every compute backend implements (CPU now, CUDA next): a session's
// forward pass and its state. The engine core (sessions, snapshots, sampling, front ends) only
// talks to these two classes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "model/kv_state.h"

namespace ds4 {

/// One session's model state on a backend, and the forward pass over it.
class BackendSession {
 public:
  virtual ~BackendSession() = default;
  /// Evaluates tokens at positions pos0.. (spec §3.7; the caller guarantees pos0 equals the
  /// number of tokens already evaluated). Writes the last token's next-token logits
  /// (n_vocab f32) and, if all_logits is non-empty, every token's (n * n_vocab).
  /// Throws ds4::Error for bad ids or positions past the context.
  virtual void eval(std::span<const int32_t> tokens, int64_t pos0, std::span<float> last_logits,
                    std::span<float> all_logits) = 0;
  /// Forgets every token.
  virtual void reset() = 0;
  /// Copies the state into host form (for snapshots).
  virtual void export_state(model::KvState& out) const = 0;
  /// Replaces the state with a host-form state of the same config and ctx.
  virtual void import_state(const model::KvState& in) = 0;
  /// Context size in tokens.
  virtual int64_t ctx() const = 0;
};

/// A compute backend bound to one loaded model.
class Backend {
 public:
  virtual ~Backend() = default;
  /// "cpu" or "cuda".
  virtual std::string name() const = 0;
  /// A new empty session of `ctx` tokens. Throws ds4::Error when it cannot be allocated.
  virtual std::unique_ptr<BackendSession> new_session(int64_t ctx) = 0;
  /// Tokens per eval call that the front ends use for prompts (Session::sync's chunk; progress
  /// and cancellation are checked between chunks): kDefaultPrefillChunk here, a backend with a
  /// batched prefill its batch (the CUDA backend's, 2048 by default), since a smaller chunk
  /// would cap the batch. Any value gives the same logits (spec §4.2).
  virtual int64_t prefill_chunk() const { return kDefaultPrefillChunk; }
  static constexpr int64_t kDefaultPrefillChunk = 256;
};

}  // namespace ds4
