// POST /v1/chat/completions (product-surface §3.2, §3.5, §3.6 "OpenAI chat sequence").
#include "server/adapter.h"

namespace ds4::server {
namespace {

[[noreturn]] void bad(const std::string& message) { throw ApiError(400, message); }

// OpenAI messages -> renderer messages: developer -> system, function -> tool, content flattened.
ojson convert_messages(const ojson& messages) {
  ojson out = ojson::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(where + " must be an object");
    const auto role_it = m.find("role");
    if (role_it == m.end() || !role_it->is_string()) bad(where + ".role must be a string");
    std::string role = role_it->get<std::string>();
    if (role == "developer") role = "system";
    if (role == "function") role = "tool";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad(where + ": unknown role \"" + role + "\"");
    ojson r = {{"role", role}};
    r["content"] = content_text(m.contains("content") ? m["content"] : ojson(), where + ".content");
    if (role == "assistant") {
      if (auto it = m.find("reasoning_content"); it != m.end() && !it->is_null()) {
        if (!it->is_string()) bad(where + ".reasoning_content must be a string");
        r["reasoning_content"] = *it;
      }
      if (auto it = m.find("tool_calls"); it != m.end() && !it->is_null()) {
        if (!it->is_array()) bad(where + ".tool_calls must be an array");
        ojson calls = ojson::array();
        for (const auto& c : *it) {
          if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
              !c["function"].contains("name") || !c["function"]["name"].is_string())
            bad(where + ".tool_calls[] must be {id, function: {name, arguments}}");
          ojson call = {{"type", "function"}, {"function", c["function"]}};
          if (c.contains("id") && c["id"].is_string()) call["id"] = c["id"];
          calls.push_back(std::move(call));
        }
        if (!calls.empty()) r["tool_calls"] = std::move(calls);
      }
    }
    if (role == "tool") {
      if (auto it = m.find("tool_call_id"); it != m.end() && it->is_string()) r["tool_call_id"] = *it;
    }
    out.push_back(std::move(r));
  }
  return out;
}

/// The request fields both OpenAI endpoints share: model, stream, stream_options.include_usage,
/// and the thinking mode from `thinking` / `reasoning_effort` (throws as the readers do).
chat::ThinkMode read_openai_common(const ojson& body, const ServerInfo& info, std::string& model,
                                   bool& stream, bool& include_usage) {
  model = read_string(body, "model", info.model_id);
  stream = read_bool(body, "stream", false);
  if (auto so = body.find("stream_options"); so != body.end() && so->is_object())
    include_usage = read_bool(*so, "include_usage", false);
  ThinkingRequest t;
  read_thinking_switch(body, t);
  if (auto it = body.find("reasoning_effort"); it != body.end())
    t.effort = read_effort(*it, "reasoning_effort");
  return resolve_think_mode(t, model, info.ctx);
}

/// The end of an OpenAI SSE stream (both endpoints): the `last` chunk (with the finish reason),
/// then, when stream_options.include_usage asked for it, a chunk `base` with no choices and the
/// usage, then the [DONE] line.
std::string openai_stream_end(const ojson& last, bool include_usage, ojson base, const Usage& usage) {
  std::string out = sse_data(last);
  if (include_usage) {
    base["choices"] = ojson::array();
    base["usage"] = openai_usage(usage);
    out += sse_data(base);
  }
  out += "data: [DONE]\n\n";
  return out;
}

class OpenAIChat final : public Adapter {
 public:
  OpenAIChat(const ojson& body, const ServerInfo& info) {
    const auto msgs = body.find("messages");
    if (msgs == body.end() || msgs->is_null()) bad("missing messages");
    if (!msgs->is_array()) bad("messages must be an array");
    if (msgs->empty()) bad("messages must not be empty");
    const auto mode = read_openai_common(body, info, model_, stream_, include_usage_);
    const bool thinking = mode != chat::ThinkMode::chat;

    bool tools_on = false;
    ojson conversation = {{"messages", convert_messages(*msgs)}};
    if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
      if (!tools->is_array()) bad("tools must be an array");
      const auto choice = body.find("tool_choice");
      const bool none = choice != body.end() && choice->is_string() && *choice == "none";
      if (!tools->empty() && !none) {
        conversation["tools"] = *tools;
        tools_on = true;
      }
    }
    gen_.prompt = render_and_tokenize(info, conversation, mode, "messages", &gen_.prompt_text);
    gen_.starts_in_thinking = thinking;
    gen_.parse_tool_calls = tools_on;
    gen_.sampling = read_sampling(body, thinking, {"temperature", "top_p", "min_p", "top_k", "seed"});
    gen_.max_tokens = read_max_tokens(body, {"max_completion_tokens", "max_tokens"},
                                      info.default_max_tokens);
    gen_.stop = read_stop(body.contains("stop") ? body["stop"] : ojson(), "stop");
    gen_.tool_id_prefix = "call_";
    id_ = "chatcmpl-" + std::to_string(next_sequence());
    created_ = unix_now();
  }

  std::string stream_begin(const Usage&) override {
    return sse_data(chunk({{"role", "assistant"}}, nullptr));
  }

  std::string stream_event(const GenEvent& e) override {
    switch (e.kind) {
      case GenEvent::Kind::reasoning:
        return sse_data(chunk({{"reasoning_content", e.text}}, nullptr));
      case GenEvent::Kind::content:
        return sse_data(chunk({{"content", e.text}}, nullptr));
      case GenEvent::Kind::tool_begin:
        return sse_data(chunk(
            {{"tool_calls", ojson::array({{{"index", e.tool_index},
                                           {"id", e.tool_id},
                                           {"type", "function"},
                                           {"function", {{"name", e.text}, {"arguments", ""}}}}})}},
            nullptr));
      case GenEvent::Kind::tool_args:
        return sse_data(chunk({{"tool_calls", ojson::array({{{"index", e.tool_index},
                                                             {"function", {{"arguments", e.text}}}}})}},
                              nullptr));
      case GenEvent::Kind::tool_end:
        return {};
    }
    return {};
  }

  std::string stream_end(const GenResult& r) override {
    return openai_stream_end(chunk(ojson::object(), finish_reason_name(r.finish)), include_usage_, base(), r.usage);
  }

  ojson response(const GenResult& r) override {
    ojson msg = {{"role", "assistant"}};
    const auto& o = r.output;
    msg["content"] = (o.content.empty() && !o.tool_calls.empty()) ? ojson() : ojson(o.content);
    if (!o.reasoning_content.empty()) msg["reasoning_content"] = o.reasoning_content;
    if (!o.tool_calls.empty()) {
      ojson calls = ojson::array();
      for (size_t i = 0; i < o.tool_calls.size(); ++i)
        calls.push_back({{"id", i < r.tool_ids.size() ? r.tool_ids[i] : std::string()},
                         {"type", "function"},
                         {"function", {{"name", o.tool_calls[i].name},
                                       {"arguments", o.tool_calls[i].arguments}}}});
      msg["tool_calls"] = std::move(calls);
    }
    ojson out = {{"id", id_}, {"object", "chat.completion"}, {"created", created_}, {"model", model_}};
    out["choices"] = ojson::array(
        {{{"index", 0}, {"message", msg}, {"finish_reason", finish_reason_name(r.finish)}}});
    out["usage"] = openai_usage(r.usage);
    return out;
  }

 private:
  ojson base() const {
    return {{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", model_}};
  }
  ojson chunk(ojson delta, const char* finish) const {
    ojson c = base();
    c["choices"] = ojson::array({{{"index", 0},
                                  {"delta", std::move(delta)},
                                  {"finish_reason", finish ? ojson(finish) : ojson()}}});
    return c;
  }

  bool include_usage_ = false;
  std::string id_;
  int64_t created_ = 0;
};

// POST /v1/completions: the prompt is rendered as a one-turn chat; the raw generation is returned.
class OpenAICompletions final : public Adapter {
 public:
  OpenAICompletions(const ojson& body, const ServerInfo& info) {
    const auto p = body.find("prompt");
    if (p == body.end() || p->is_null()) bad("missing prompt");
    std::string prompt;
    if (p->is_string()) {
      prompt = p->get<std::string>();
    } else if (p->is_array() && !p->empty() && (*p)[0].is_string()) {
      prompt = (*p)[0].get<std::string>();
    } else {
      bad("prompt must be a string or an array of strings");
    }
    const auto mode = read_openai_common(body, info, model_, stream_, include_usage_);
    const bool thinking = mode != chat::ThinkMode::chat;
    const ojson conversation = ojson::array(
        {{{"role", "system"}, {"content", "You are a helpful assistant"}},
         {{"role", "user"}, {"content", prompt}}});
    gen_.prompt = render_and_tokenize(info, conversation, mode, "prompt", &gen_.prompt_text);
    gen_.starts_in_thinking = thinking;
    gen_.parse_output = false;
    gen_.sampling = read_sampling(body, thinking, {"temperature", "top_p", "min_p", "top_k", "seed"});
    gen_.max_tokens = read_max_tokens(body, {"max_tokens"}, info.default_max_tokens);
    gen_.stop = read_stop(body.contains("stop") ? body["stop"] : ojson(), "stop");
    id_ = "cmpl-" + std::to_string(next_sequence());
    created_ = unix_now();
  }

  std::string stream_begin(const Usage&) override { return {}; }
  std::string stream_event(const GenEvent& e) override {
    if (e.kind != GenEvent::Kind::content || e.text.empty()) return {};
    return sse_data(chunk(e.text, nullptr));
  }
  std::string stream_end(const GenResult& r) override {
    return openai_stream_end(chunk("", finish_reason_name(r.finish)), include_usage_, base(), r.usage);
  }
  ojson response(const GenResult& r) override {
    ojson out = base();
    out["choices"] = ojson::array({{{"text", r.output.content},
                                    {"index", 0},
                                    {"logprobs", nullptr},
                                    {"finish_reason", finish_reason_name(r.finish)}}});
    out["usage"] = openai_usage(r.usage);
    return out;
  }

 private:
  ojson base() const {
    return {{"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", model_}};
  }
  ojson chunk(const std::string& text, const char* finish) const {
    ojson c = base();
    c["choices"] = ojson::array({{{"text", text},
                                  {"index", 0},
                                  {"logprobs", nullptr},
                                  {"finish_reason", finish ? ojson(finish) : ojson()}}});
    return c;
  }
  bool include_usage_ = false;
  std::string id_;
  int64_t created_ = 0;
};

}  // namespace

std::unique_ptr<Adapter> make_openai_chat(const ojson& body, const ServerInfo& info) {
  return std::make_unique<OpenAIChat>(body, info);
}

std::unique_ptr<Adapter> make_openai_completions(const ojson& body, const ServerInfo& info) {
  return std::make_unique<OpenAICompletions>(body, info);
}

}  // namespace ds4::server
