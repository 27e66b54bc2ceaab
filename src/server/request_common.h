// Request parsing shared by every API adapter (product-surface §3.2-3.3): JSON body with a
// nesting cap, thinking-mode mapping, sampling defaults, max_tokens, stop strings, prompt
// tokenization with the context check. Every bad input throws ApiError(400, ...).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/render.h"
#include "engine/sampler.h"
#include "server/tool_memory.h"
#include "tokenizer/tokenizer.h"

namespace ds4::server {

using ojson = nlohmann::ordered_json;

/// What the adapters need to know about the running server.
struct ServerInfo {
  const tok::Tokenizer* tokenizer = nullptr;  ///< the model's tokenizer (thread-safe)
  int64_t ctx = 32768;                        ///< context of the live session (tokens)
  int64_t default_max_tokens = 393216;        ///< --tokens
  std::string model_id = "deepseek-v4-flash";
  /// Exact DSML replay map (§3.9); null = always render tool calls canonically
  /// (--disable-exact-dsml-tool-replay).
  ToolMemory* tool_memory = nullptr;
  /// --kv-disk-dir (or ""): tool ids the memory does not know are looked up in the KTM sections
  /// of its snapshots before rendering (a restarted server replays what it sampled before).
  std::string kv_disk_dir;
};

/// Maximum JSON nesting depth of a request body (product-surface §3.2).
inline constexpr int kMaxJsonDepth = 256;

/// Parses a request body. Throws ApiError 400 "invalid JSON request" for malformed JSON,
/// invalid UTF-8, nesting deeper than kMaxJsonDepth or a top level that is not an object.
ojson parse_json_body(std::string_view body);

/// Thinking switches found in a request.
struct ThinkingRequest {
  bool explicit_switch = false;       ///< `thinking`/`think` (or Responses reasoning.effort) sent
  bool enabled = true;                ///< thinking on unless switched off
  std::optional<std::string> effort;  ///< validated effort name, or none when absent/null
};

/// Validates an effort value (string or null). Throws ApiError 400 naming `field` for any other
/// string than max, xhigh, high, medium, low, minimal, none, or a non-string.
std::optional<std::string> read_effort(const ojson& value, std::string_view field);

/// Reads `thinking` ({type: enabled|disabled|adaptive}) and boolean `think` into `t`.
/// Throws ApiError 400 for other shapes.
void read_thinking_switch(const ojson& body, ThinkingRequest& t);

/// §3.3 mapping: NONE (chat) when disabled or effort none, MAX when effort max, else HIGH;
/// model aliases deepseek-chat / deepseek-reasoner apply only without an explicit switch; MAX
/// becomes HIGH below chat::kThinkMaxMinContext.
chat::ThinkMode resolve_think_mode(const ThinkingRequest& t, const std::string& model, int64_t ctx);

/// Sampling settings: in thinking modes the §3.3 defaults are forced (temperature 1, top_p 1,
/// min_p 0.05, top_k 0) whatever the client sent; otherwise the client's temperature/top_p/
/// min_p/top_k (only keys listed in `keys` are read). `seed` is always read when listed.
/// Throws ApiError 400 for a wrong type or a value out of range (temperature 0..100, top_p and
/// min_p 0..1, top_k >= 0, seed >= 0).
SamplerSettings read_sampling(const ojson& body, bool thinking,
                              const std::vector<std::string_view>& keys);

/// The first present, non-null key of `keys` as max_tokens, else `fallback`. Throws ApiError 400
/// for a non-integer or a value < 1. Large values are kept (the context caps generation).
int64_t read_max_tokens(const ojson& body, const std::vector<std::string_view>& keys,
                        int64_t fallback);

/// `stop` as a string or an array of strings (null/absent = none). Throws ApiError 400 otherwise.
std::vector<std::string> read_stop(const ojson& value, std::string_view field);

/// Optional boolean field (absent/null = fallback). Throws ApiError 400 for other types.
bool read_bool(const ojson& body, std::string_view key, bool fallback);

/// Optional string field (absent/null = fallback). Throws ApiError 400 for other types.
std::string read_string(const ojson& body, std::string_view key, std::string fallback);

/// Text of a content value: a string, null (""), or an array of parts whose `text` strings are
/// concatenated (parts without text are skipped). Throws ApiError 400 naming `where` otherwise.
std::string content_text(const ojson& content, std::string_view where);

/// Renders `conversation` (chat::render_prompt input) and tokenizes it with special markers.
/// Assistant tool calls whose ids info.tool_memory knows are rendered as the exact sampled block.
/// Throws ApiError 400 for a conversation the renderer rejects, and ApiError 400 with code
/// context_length_exceeded, param `param`, n_prompt_tokens and n_ctx when tokens >= ctx.
std::vector<int32_t> render_and_tokenize(const ServerInfo& info, const ojson& conversation,
                                         chat::ThinkMode mode, std::string_view param,
                                         std::string* rendered = nullptr);

/// Tokenizes already rendered prompt text with the same context check.
std::vector<int32_t> tokenize_prompt(const ServerInfo& info, std::string_view text,
                                     std::string_view param);

}  // namespace ds4::server
