// --perplexity-file (product-surface §2.1): teacher-forced NLL of raw text. The text is
// tokenized as plain text (no specials, no BOS: what ds4-nano was trained on, docs/nano.md);
// the first 32 tokens are a fixed prefix and are not scored; every later token t_i is scored
// with -log softmax(logits after t_0..t_{i-1})[t_i], accumulated in double.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "engine/session.h"

namespace ds4::cli {

/// Tokens before the first scored one.
inline constexpr int64_t kPerplexityPrefix = 32;

struct PerplexityResult {
  int64_t tokens = 0;  ///< tokens evaluated (prefix included)
  int64_t scored = 0;  ///< tokens - kPerplexityPrefix
  double nll = 0;      ///< sum of -log p over the scored tokens (nats)
  double avg_nll() const { return scored ? nll / static_cast<double>(scored) : 0.0; }
  double ppl() const;  ///< exp(avg_nll)
};

/// Scores `tokens` on an empty `session` (prefilled in chunks of `chunk`). Throws ds4::Error
/// when there are not more than kPerplexityPrefix tokens, when they do not fit the session's
/// context, or when the session is not empty.
PerplexityResult perplexity(Session& session, std::span<const int32_t> tokens, int64_t chunk = 256);

/// The output line: "tokens=N scored=N nll=X avg_nll=X ppl=X" (6 decimals).
std::string format_perplexity(const PerplexityResult& r);

}  // namespace ds4::cli
