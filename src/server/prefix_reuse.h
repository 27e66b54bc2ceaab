// Which tokens a request's prompt becomes so that the live session is reused (product-surface
// §3.9 steps 4-6): the exact token prefix, the thinking-visible alias of a finished thinking
// turn, then the live text prefix. Pure function of the live tokens and the request: unit-tested
// with the tokenizer alone.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ds4::server {

/// After a thinking turn that ended with EOS, the next request renders that turn without its
/// reasoning (the official encoder drops reasoning before the last user turn when there is no
/// tool context): "prompt without its final <think>" + "</think>" + content + EOS. That text is
/// the key of the live frontier, whose KV still holds the hidden reasoning (§3.9 step 5).
struct VisibleAlias {
  std::string text;             ///< the visible transcript the next request starts with
  size_t live_tokens = 0;       ///< session length when the alias was taken
  std::vector<int32_t> tail;    ///< sampled tokens not yet evaluated: the last one, then EOS
};

/// The visible-transcript key of a thinking turn: `prompt_text` must end with `<think>`; returns
/// nullopt otherwise.
std::optional<std::string> thinking_visible_key(std::string_view prompt_text, std::string_view content);

/// How a prompt reuses the live session.
enum class ReuseStep { none, token_prefix, thinking_visible, text_prefix };

/// "none", "token-prefix", "thinking-visible" or "text-prefix".
const char* reuse_step_name(ReuseStep step);

/// The tokens to sync the session to, and why.
struct PrefixPlan {
  std::vector<int32_t> tokens;  ///< the prompt as it will be evaluated (live tokens first when reused)
  ReuseStep step = ReuseStep::none;
};

/// Plans the prompt (size < ctx). In order: (4) `live` is a token prefix of `prompt` -> prompt;
/// (5) `alias` matches the live length and `prompt_text` starts with alias.text -> live + tail +
/// tokens of the rest; (6) the decoded live bytes are a prefix of `prompt_text` ending on a UTF-8
/// character boundary -> live + tokens of the rest (only the rest is tokenized: BPE merges may
/// cross the boundary, so the full-prompt tokens are never spliced). A plan that would reach
/// `ctx` falls back to `prompt`. Otherwise step none and `prompt`.
PrefixPlan plan_prefix(const tok::Tokenizer& tokenizer, std::span<const int32_t> live,
                       const std::optional<VisibleAlias>& alias, std::span<const int32_t> prompt,
                       std::string_view prompt_text, int64_t ctx);

}  // namespace ds4::server
