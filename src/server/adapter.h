// API adapters: each endpoint family maps its request JSON to one GenRequest and maps the core's
// events and result back to its own response JSON and SSE event lifecycle (product-surface
// §3.5-3.7). They hold per-request state only and never touch the model.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "server/api_error.h"
#include "server/core.h"
#include "server/request_common.h"

namespace ds4::server {

/// The endpoint families.
enum class Api { chat, completions, responses, anthropic };

/// JSON text of `value` (invalid UTF-8 replaced by U+FFFD, never a throw).
std::string dump_json(const ojson& value);
/// One SSE frame `data: JSON\n\n`.
std::string sse_data(const ojson& value);
/// One SSE frame `event: NAME\ndata: JSON\n\n`.
std::string sse_event(std::string_view name, const ojson& value);

/// OpenAI-shaped error body {"error": {message, type: invalid_request_error, [param, code,
/// n_prompt_tokens, n_ctx]}} (also used for Responses, completions, models and unknown paths).
ojson openai_error_body(const ApiError& error);
/// Anthropic-shaped error body {"type": "error", "error": {type, message, [n_prompt_tokens,
/// n_ctx]}}.
ojson anthropic_error_body(const ApiError& error);

/// Per-request adapter: built from the request body (throws ApiError for bad requests), then
/// driven with the job's events (streaming) or its result (non-streaming).
class Adapter {
 public:
  virtual ~Adapter() = default;

  /// The generation request (rendered, tokenized, context-checked).
  const GenRequest& request() const { return gen_; }
  bool stream() const { return stream_; }
  const std::string& model() const { return model_; }

  /// SSE frames sent before any event (role chunk, message_start, response.created), once the
  /// prompt is prefilled: `usage` holds the prompt and reused token counts.
  virtual std::string stream_begin(const Usage& usage) = 0;
  /// SSE frames for one event.
  virtual std::string stream_event(const GenEvent& event) = 0;
  /// Closing frames (finish chunk, usage, [DONE], message_stop, response.completed ...).
  virtual std::string stream_end(const GenResult& result) = 0;
  /// SSE error frame (product-surface §3.6 "Error frames").
  virtual std::string stream_error(const std::string& message);
  /// The non-streamed response body.
  virtual ojson response(const GenResult& result) = 0;
  /// The error body shape of this API.
  virtual ojson error_body(const ApiError& error) const { return openai_error_body(error); }

 protected:
  GenRequest gen_;
  bool stream_ = false;
  std::string model_;
};

/// Builds the adapter of `api` from a parsed body. Throws ApiError (400 for bad requests,
/// context_length_exceeded for prompts that do not fit).
std::unique_ptr<Adapter> make_adapter(Api api, const ojson& body, const ServerInfo& info);

/// The error body shape of `api` for errors raised before an adapter exists.
ojson error_body_for(Api api, const ApiError& error);

// The per-API factories (one file each).
std::unique_ptr<Adapter> make_openai_chat(const ojson& body, const ServerInfo& info);
std::unique_ptr<Adapter> make_openai_completions(const ojson& body, const ServerInfo& info);
std::unique_ptr<Adapter> make_responses(const ojson& body, const ServerInfo& info);
std::unique_ptr<Adapter> make_anthropic(const ojson& body, const ServerInfo& info);

/// OpenAI usage object {prompt_tokens, completion_tokens, total_tokens,
/// prompt_tokens_details{cached_tokens, cache_write_tokens}}.
ojson openai_usage(const Usage& usage);

/// Unix time in seconds.
int64_t unix_now();

/// A process-wide increasing number for chatcmpl-<n> / cmpl-<n> ids.
uint64_t next_sequence();

}  // namespace ds4::server
