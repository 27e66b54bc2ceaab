// Prompt building and the generation loop shared by one-shot mode and the REPL.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "chat/render.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/session.h"

namespace ds4::cli {

/// Statistics of one turn (printed as "prefill: X t/s, generation: Y t/s").
struct TurnStats {
  int64_t prompt_tokens = 0;
  int64_t generated = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  bool hit_eos = false;
  bool context_full = false;  ///< generation stopped because the session reached ctx
};

/// Renders a single-turn prompt (system + user) with the official chat encoding and tokenizes
/// it, special markers included.
std::vector<int32_t> build_prompt(const Engine& engine, const std::string& system,
                                  const std::string& user, chat::ThinkMode mode, int64_t ctx);

/// Prefills whatever of `prompt` the session does not hold yet (progress bar on a terminal),
/// then samples up to max_tokens tokens, streaming complete UTF-8 text to stdout. Stops at EOS,
/// at max_tokens, when the context is full, or when `stop` becomes true.
/// Throws ds4::Error when the prompt does not fit the context.
TurnStats generate(Engine& engine, Session& session, const std::vector<int32_t>& prompt,
                   Sampler& sampler, int64_t max_tokens, const std::atomic<bool>& stop);

}  // namespace ds4::cli
