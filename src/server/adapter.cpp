#include "server/adapter.h"

#include <atomic>
#include <chrono>

namespace ds4::server {

std::string dump_json(const ojson& value) {
  return value.dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace);
}

std::string sse_data(const ojson& value) { return "data: " + dump_json(value) + "\n\n"; }

std::string sse_event(std::string_view name, const ojson& value) {
  return "event: " + std::string(name) + "\ndata: " + dump_json(value) + "\n\n";
}

ojson openai_error_body(const ApiError& error) {
  ojson e = {{"message", error.what()}, {"type", "invalid_request_error"}};
  if (!error.param.empty()) e["param"] = error.param;
  if (!error.code.empty()) e["code"] = error.code;
  if (error.n_prompt_tokens >= 0) {
    e["n_prompt_tokens"] = error.n_prompt_tokens;
    e["n_ctx"] = error.n_ctx;
  }
  return {{"error", e}};
}

ojson anthropic_error_body(const ApiError& error) {
  ojson e = {{"type", "invalid_request_error"}, {"message", error.what()}};
  if (error.n_prompt_tokens >= 0) {
    e["n_prompt_tokens"] = error.n_prompt_tokens;
    e["n_ctx"] = error.n_ctx;
  }
  return {{"type", "error"}, {"error", e}};
}

std::string Adapter::stream_error(const std::string& message) {
  return sse_event("error", ojson{{"error", {{"message", message}, {"type", "server_error"}}}});
}

std::unique_ptr<Adapter> make_adapter(Api api, const ojson& body, const ServerInfo& info) {
  switch (api) {
    case Api::chat: return make_openai_chat(body, info);
    case Api::completions: return make_openai_completions(body, info);
    case Api::responses: return make_responses(body, info);
    case Api::anthropic: return make_anthropic(body, info);
  }
  return nullptr;
}

ojson error_body_for(Api api, const ApiError& error) {
  return api == Api::anthropic ? anthropic_error_body(error) : openai_error_body(error);
}

ojson openai_usage(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details",
           {{"cached_tokens", u.cached_tokens},
            {"cache_write_tokens", u.prompt_tokens - u.cached_tokens}}}};
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint64_t next_sequence() {
  static std::atomic<uint64_t> n{0};
  return ++n;
}

}  // namespace ds4::server
