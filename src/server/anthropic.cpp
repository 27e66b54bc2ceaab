// POST /v1/messages (product-surface §3.2, §3.5, §3.6 "Anthropic sequence").
#include "server/adapter.h"
#include "server/ids.h"

namespace ds4::server {
namespace {

[[noreturn]] void bad(const std::string& message) { throw ApiError(400, message); }

std::string block_text(const ojson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return {};
  if (!content.is_array()) bad(where + " must be a string or an array of blocks");
  std::string out;
  for (const auto& b : content) {
    if (!b.is_object()) bad(where + " blocks must be objects");
    const std::string type = b.value("type", "");
    if (type != "text") bad(where + ": block type \"" + type + "\" is not supported here");
    if (!b.contains("text") || !b["text"].is_string()) bad(where + ": text block without text");
    if (!out.empty()) out += "\n\n";
    out += b["text"].get<std::string>();
  }
  return out;
}

// Anthropic messages (+ system) -> renderer messages.
ojson convert(const ojson& body) {
  ojson out = ojson::array();
  if (auto s = body.find("system"); s != body.end() && !s->is_null()) {
    const std::string sys = block_text(*s, "system");
    if (!sys.empty()) out.push_back({{"role", "system"}, {"content", sys}});
  }
  const auto& msgs = body["messages"];
  for (size_t i = 0; i < msgs.size(); ++i) {
    const auto& m = msgs[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(where + " must be an object");
    const std::string role = m.value("role", "");
    if (role != "user" && role != "assistant") bad(where + ": role must be user or assistant");
    const ojson content = m.contains("content") ? m["content"] : ojson();
    if (content.is_string() || content.is_null()) {
      out.push_back({{"role", role}, {"content", content.is_null() ? "" : content}});
      continue;
    }
    if (!content.is_array()) bad(where + ".content must be a string or an array of blocks");
    std::string text, thinking;
    ojson calls = ojson::array();
    for (size_t k = 0; k < content.size(); ++k) {
      const auto& b = content[k];
      const std::string bw = where + ".content[" + std::to_string(k) + "]";
      if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
        bad(bw + " must be an object with a type");
      const std::string type = b["type"].get<std::string>();
      if (type == "text") {
        if (!b.contains("text") || !b["text"].is_string()) bad(bw + ".text must be a string");
        text += b["text"].get<std::string>();
      } else if (type == "thinking" && role == "assistant") {
        if (b.contains("thinking") && b["thinking"].is_string()) thinking += b["thinking"].get<std::string>();
      } else if (type == "redacted_thinking" && role == "assistant") {
        // opaque to us; nothing to replay
      } else if (type == "tool_use" && role == "assistant") {
        if (!b.contains("name") || !b["name"].is_string()) bad(bw + ".name must be a string");
        ojson input = b.contains("input") ? b["input"] : ojson::object();
        calls.push_back({{"id", b.value("id", "")},
                         {"type", "function"},
                         {"function", {{"name", b["name"]}, {"arguments", input}}}});
      } else if (type == "tool_result" && role == "user") {
        if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string())
          bad(bw + ".tool_use_id must be a string");
        const std::string result = block_text(b.contains("content") ? b["content"] : ojson(), bw + ".content");
        // Pending user text goes before the tool results it preceded.
        if (!text.empty()) {
          out.push_back({{"role", "user"}, {"content", text}});
          text.clear();
        }
        out.push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", result}});
      } else {
        bad(bw + ": content block type \"" + type + "\" is not supported for role " + role);
      }
    }
    if (role == "assistant") {
      ojson a = {{"role", "assistant"}, {"content", text}};
      if (!thinking.empty()) a["reasoning_content"] = thinking;
      if (!calls.empty()) a["tool_calls"] = std::move(calls);
      out.push_back(std::move(a));
    } else if (!text.empty()) {
      out.push_back({{"role", "user"}, {"content", text}});
    }
  }
  return out;
}

const char* stop_reason(const GenResult& r) {
  switch (r.finish) {
    case FinishReason::tool_calls: return "tool_use";
    case FinishReason::length: return "max_tokens";
    default: return r.stop_sequence.empty() ? "end_turn" : "stop_sequence";
  }
}

class Anthropic final : public Adapter {
 public:
  Anthropic(const ojson& body, const ServerInfo& info) {
    const auto msgs = body.find("messages");
    if (msgs == body.end() || msgs->is_null()) bad("missing messages");
    if (!msgs->is_array()) bad("messages must be an array");
    if (msgs->empty()) bad("messages must not be empty");
    model_ = read_string(body, "model", info.model_id);
    stream_ = read_bool(body, "stream", false);
    ThinkingRequest t;
    read_thinking_switch(body, t);
    if (auto oc = body.find("output_config"); oc != body.end() && oc->is_object() && oc->contains("effort"))
      t.effort = read_effort((*oc)["effort"], "output_config.effort");
    if (auto it = body.find("reasoning_effort"); it != body.end() && !it->is_null())
      t.effort = read_effort(*it, "reasoning_effort");
    const auto mode = resolve_think_mode(t, model_, info.ctx);
    const bool thinking = mode != chat::ThinkMode::chat;

    ojson conversation = {{"messages", convert(body)}};
    bool tools_on = false;
    if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
      if (!tools->is_array()) bad("tools must be an array");
      bool none = false;
      if (auto tc = body.find("tool_choice"); tc != body.end() && tc->is_object())
        none = tc->value("type", "") == "none";
      ojson fns = ojson::array();
      for (const auto& tool : *tools) {
        if (!tool.is_object() || !tool.contains("name") || !tool["name"].is_string())
          bad("tools[] must be objects with a name");
        ojson fn = {{"name", tool["name"]}};
        if (tool.contains("description")) fn["description"] = tool["description"];
        fn["parameters"] = tool.contains("input_schema") ? tool["input_schema"] : ojson::object();
        fns.push_back({{"type", "function"}, {"function", std::move(fn)}});
      }
      if (!fns.empty() && !none) {
        conversation["tools"] = std::move(fns);
        tools_on = true;
      }
    }
    gen_.prompt = render_and_tokenize(info, conversation, mode, "messages", &gen_.prompt_text);
    gen_.starts_in_thinking = thinking;
    gen_.parse_tool_calls = tools_on;
    gen_.sampling = read_sampling(body, thinking, {"temperature", "top_p", "top_k"});
    gen_.max_tokens = read_max_tokens(body, {"max_tokens"}, info.default_max_tokens);
    gen_.stop = read_stop(body.contains("stop_sequences") ? body["stop_sequences"] : ojson(),
                          "stop_sequences");
    gen_.tool_id_prefix = "toolu_";
    id_ = "msg_" + random_hex(12);
  }

  std::string stream_begin(const Usage& u) override {
    ojson msg = {{"id", id_},         {"type", "message"},       {"role", "assistant"},
                 {"model", model_},   {"content", ojson::array()}, {"stop_reason", nullptr},
                 {"stop_sequence", nullptr}};
    msg["usage"] = usage(u);  // output_tokens is 0 here
    return sse_event("message_start", {{"type", "message_start"}, {"message", msg}});
  }

  std::string stream_event(const GenEvent& e) override {
    std::string out;
    switch (e.kind) {
      case GenEvent::Kind::reasoning:
        if (open_ != Block::thinking) out += open(Block::thinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
        out += delta({{"type", "thinking_delta"}, {"thinking", e.text}});
        saw_thinking_ = true;
        break;
      case GenEvent::Kind::content:
        if (open_ != Block::text) out += open(Block::text, {{"type", "text"}, {"text", ""}});
        out += delta({{"type", "text_delta"}, {"text", e.text}});
        saw_text_ = true;
        break;
      case GenEvent::Kind::tool_begin:
        out += open(Block::tool, {{"type", "tool_use"}, {"id", e.tool_id}, {"name", e.text},
                                  {"input", ojson::object()}});
        saw_tool_ = true;
        break;
      case GenEvent::Kind::tool_args:
        if (open_ == Block::tool) out += delta({{"type", "input_json_delta"}, {"partial_json", e.text}});
        break;
      case GenEvent::Kind::tool_end:
        out += close();
        break;
    }
    return out;
  }

  std::string stream_end(const GenResult& r) override {
    std::string out = close();
    if (!saw_text_ && !saw_tool_) {
      out += open(Block::text, {{"type", "text"}, {"text", ""}});
      out += close();
    }
    ojson md = {{"type", "message_delta"},
                {"delta", {{"stop_reason", stop_reason(r)},
                           {"stop_sequence", r.stop_sequence.empty() ? ojson() : ojson(r.stop_sequence)}}},
                {"usage", {{"output_tokens", r.usage.completion_tokens}}}};
    out += sse_event("message_delta", md);
    out += sse_event("message_stop", {{"type", "message_stop"}});
    return out;
  }

  std::string stream_error(const std::string& message) override {
    return sse_event("error", {{"type", "error"}, {"error", {{"type", "api_error"}, {"message", message}}}});
  }

  ojson response(const GenResult& r) override {
    ojson content = ojson::array();
    const auto& o = r.output;
    if (!o.reasoning_content.empty())
      content.push_back({{"type", "thinking"}, {"thinking", o.reasoning_content}, {"signature", id_}});
    if (!o.content.empty() || o.tool_calls.empty())
      content.push_back({{"type", "text"}, {"text", o.content}});
    for (size_t i = 0; i < o.tool_calls.size(); ++i) {
      ojson input = ojson::parse(o.tool_calls[i].arguments, nullptr, false);
      if (input.is_discarded() || !input.is_object()) input = ojson::object();
      content.push_back({{"type", "tool_use"},
                         {"id", i < r.tool_ids.size() ? r.tool_ids[i] : std::string()},
                         {"name", o.tool_calls[i].name},
                         {"input", input}});
    }
    return {{"id", id_},
            {"type", "message"},
            {"role", "assistant"},
            {"model", model_},
            {"content", content},
            {"stop_reason", stop_reason(r)},
            {"stop_sequence", r.stop_sequence.empty() ? ojson() : ojson(r.stop_sequence)},
            {"usage", usage(r.usage)}};
  }

  ojson error_body(const ApiError& error) const override { return anthropic_error_body(error); }

 private:
  enum class Block { none, thinking, text, tool };

  static ojson usage(const Usage& u) {
    return {{"input_tokens", u.prompt_tokens - u.cached_tokens},
            {"output_tokens", u.completion_tokens},
            {"cache_read_input_tokens", u.cached_tokens},
            {"cache_creation_input_tokens", 0}};
  }
  std::string open(Block b, ojson block) {
    std::string out = close();
    open_ = b;
    out += sse_event("content_block_start",
                     {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
    return out;
  }
  std::string delta(ojson d) {
    return sse_event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", d}});
  }
  std::string close() {
    if (open_ == Block::none) return {};
    std::string out;
    if (open_ == Block::thinking) out += delta({{"type", "signature_delta"}, {"signature", id_}});
    out += sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
    open_ = Block::none;
    ++index_;
    return out;
  }

  std::string id_;
  Block open_ = Block::none;
  int index_ = 0;
  bool saw_text_ = false, saw_tool_ = false, saw_thinking_ = false;
};

}  // namespace

std::unique_ptr<Adapter> make_anthropic(const ojson& body, const ServerInfo& info) {
  return std::make_unique<Anthropic>(body, info);
}

}  // namespace ds4::server
