// POST /v1/responses (product-surface §3.2, §3.5, §3.6 "Responses sequence").
#include "server/adapter.h"
#include "server/ids.h"

namespace ds4::server {
namespace {

[[noreturn]] void bad(const std::string& message) { throw ApiError(400, message); }

std::string parts_text(const ojson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return {};
  if (!content.is_array()) bad(where + " must be a string or an array of content parts");
  std::string out;
  for (const auto& p : content) {
    if (!p.is_object()) bad(where + " parts must be objects");
    const std::string type = p.value("type", "");
    if (type != "input_text" && type != "output_text" && type != "text" && type != "summary_text" &&
        type != "reasoning_text")
      bad(where + ": content part type \"" + type + "\" is not supported");
    if (!p.contains("text") || !p["text"].is_string()) bad(where + ": part without text");
    out += p["text"].get<std::string>();
  }
  return out;
}

std::string arguments_text(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "{}";
  return dump_json(v);
}

// Responses input items -> renderer messages.
ojson convert(const ojson& body) {
  ojson out = ojson::array();
  if (auto ins = body.find("instructions"); ins != body.end() && !ins->is_null()) {
    if (!ins->is_string()) bad("instructions must be a string");
    out.push_back({{"role", "system"}, {"content", *ins}});
  }
  const auto& input = body["input"];
  if (input.is_string()) {
    out.push_back({{"role", "user"}, {"content", input}});
    return out;
  }
  if (!input.is_array()) bad("input must be a string or an array of items");
  std::string pending_reasoning;
  auto last_assistant = [&]() -> ojson* {
    if (!out.empty() && out.back()["role"] == "assistant") return &out.back();
    out.push_back({{"role", "assistant"}, {"content", ""}});
    if (!pending_reasoning.empty()) {
      out.back()["reasoning_content"] = pending_reasoning;
      pending_reasoning.clear();
    }
    return &out.back();
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const auto& item = input[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) bad(where + " must be an object");
    if (auto st = item.find("status"); st != item.end() && !st->is_null() && *st != "completed")
      bad(where + ": item status must be completed");
    const std::string type = item.value("type", item.contains("role") ? "message" : "");
    if (type == "message") {
      std::string role = item.value("role", "");
      if (role == "developer") role = "system";
      if (role != "system" && role != "user" && role != "assistant")
        bad(where + ": unknown role \"" + role + "\"");
      const std::string text = parts_text(item.contains("content") ? item["content"] : ojson(),
                                           where + ".content");
      if (role == "assistant") {
        ojson a = {{"role", "assistant"}, {"content", text}};
        if (!pending_reasoning.empty()) {
          a["reasoning_content"] = pending_reasoning;
          pending_reasoning.clear();
        }
        out.push_back(std::move(a));
      } else {
        out.push_back({{"role", role}, {"content", text}});
      }
    } else if (type == "reasoning") {
      std::string r;
      if (auto s = item.find("summary"); s != item.end() && s->is_array()) r += parts_text(*s, where + ".summary");
      if (auto c = item.find("content"); c != item.end() && c->is_array()) r += parts_text(*c, where + ".content");
      pending_reasoning += r;
    } else if (type == "function_call" || type == "custom_tool_call") {
      if (!item.contains("name") || !item["name"].is_string()) bad(where + ".name must be a string");
      const std::string args = type == "function_call"
                                   ? arguments_text(item.value("arguments", ojson("{}")))
                                   : dump_json(ojson{{"input", item.value("input", "")}});
      ojson* a = last_assistant();
      if (!a->contains("tool_calls")) (*a)["tool_calls"] = ojson::array();
      (*a)["tool_calls"].push_back({{"id", item.value("call_id", "")},
                                    {"type", "function"},
                                    {"function", {{"name", item["name"]}, {"arguments", args}}}});
    } else if (type == "function_call_output" || type == "custom_tool_call_output") {
      const ojson o = item.contains("output") ? item["output"] : ojson("");
      const std::string text = o.is_string() ? o.get<std::string>() : parts_text(o, where + ".output");
      out.push_back({{"role", "tool"}, {"tool_call_id", item.value("call_id", "")}, {"content", text}});
    } else if (type == "compaction" || type == "context_compaction" || type == "local_shell_call" ||
               type == "local_shell_call_output" || type == "web_search_call" ||
               type == "tool_search_call" || type == "tool_search_output" ||
               type == "image_generation_call") {
      // Accepted and not rendered (no model-visible text of our own for these).
    } else {
      bad(where + ": unsupported item type \"" + type + "\"");
    }
  }
  return out;
}

class Responses final : public Adapter {
 public:
  Responses(const ojson& body, const ServerInfo& info) {
    const auto input = body.find("input");
    if (input == body.end() || input->is_null()) bad("missing input");
    for (const char* k : {"previous_response_id", "conversation"})
      if (auto it = body.find(k); it != body.end() && !it->is_null())
        bad(std::string(k) + " is not supported; replay full input instead");
    model_ = read_string(body, "model", info.model_id);
    stream_ = read_bool(body, "stream", false);

    ThinkingRequest t;
    read_thinking_switch(body, t);
    if (auto r = body.find("reasoning"); r != body.end() && !r->is_null()) {
      if (!r->is_object()) bad("reasoning must be an object");
      if (auto e = r->find("effort"); e != r->end() && !e->is_null()) {
        t.effort = read_effort(*e, "reasoning.effort");
        t.explicit_switch = true;
      }
      if (auto s = r->find("summary"); s != r->end() && s->is_string())
        summary_ = *s == "auto" || *s == "concise" || *s == "detailed";
    }
    const auto mode = resolve_think_mode(t, model_, info.ctx);
    const bool thinking = mode != chat::ThinkMode::chat;

    ojson conversation = {{"messages", convert(body)}};
    bool none = false;
    if (auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null()) {
      if (tc->is_string()) {
        const std::string s = tc->get<std::string>();
        if (s != "none" && s != "auto") bad("tool_choice=" + s + " not supported");
        none = s == "none";
      } else {
        bad("forced tool_choice not supported");
      }
    }
    bool tools_on = false;
    if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
      if (!tools->is_array()) bad("tools must be an array");
      ojson fns = ojson::array();
      for (const auto& tool : *tools) {
        if (!tool.is_object()) bad("tools[] must be objects");
        if (tool.value("type", "function") != "function") continue;
        if (!tool.contains("name") || !tool["name"].is_string()) bad("function tools need a name");
        ojson fn = {{"name", tool["name"]}};
        if (tool.contains("description")) fn["description"] = tool["description"];
        fn["parameters"] = tool.contains("parameters") ? tool["parameters"] : ojson::object();
        fns.push_back({{"type", "function"}, {"function", std::move(fn)}});
      }
      if (!fns.empty() && !none) {
        conversation["tools"] = std::move(fns);
        tools_on = true;
      }
    }
    gen_.prompt = render_and_tokenize(info, conversation, mode, "input", &gen_.prompt_text);
    gen_.starts_in_thinking = thinking;
    gen_.parse_tool_calls = tools_on;
    gen_.sampling = read_sampling(body, thinking, {"temperature", "top_p"});
    gen_.max_tokens = read_max_tokens(body, {"max_output_tokens", "max_tokens"}, info.default_max_tokens);
    gen_.tool_id_prefix = "call_";
    id_ = "resp_" + random_hex(12);
    created_ = unix_now();
  }

  std::string stream_begin(const Usage&) override {
    return event("response.created", {{"response", envelope("in_progress")}});
  }

  std::string stream_event(const GenEvent& e) override {
    std::string out;
    switch (e.kind) {
      case GenEvent::Kind::reasoning:
        if (!summary_) break;
        if (!reasoning_open_) {
          reasoning_open_ = true;
          reasoning_index_ = next_index_++;
          reasoning_id_ = "rs_" + random_hex(12);
          out += event("response.output_item.added",
                       {{"output_index", reasoning_index_},
                        {"item", {{"id", reasoning_id_}, {"type", "reasoning"}, {"summary", ojson::array()}}}});
          out += event("response.reasoning_summary_part.added",
                       {{"item_id", reasoning_id_}, {"output_index", reasoning_index_}, {"summary_index", 0},
                        {"part", {{"type", "summary_text"}, {"text", ""}}}});
        }
        reasoning_ += e.text;
        out += event("response.reasoning_summary_text.delta",
                     {{"item_id", reasoning_id_}, {"output_index", reasoning_index_}, {"summary_index", 0},
                      {"delta", e.text}});
        break;
      case GenEvent::Kind::content:
        out += close_reasoning(true);
        if (!message_open_) {
          message_open_ = true;
          message_index_ = next_index_++;
          message_id_ = "msg_" + random_hex(12);
          out += event("response.output_item.added",
                       {{"output_index", message_index_},
                        {"item", {{"id", message_id_}, {"type", "message"}, {"status", "in_progress"},
                                  {"role", "assistant"}, {"content", ojson::array()}}}});
          out += event("response.content_part.added",
                       {{"item_id", message_id_}, {"output_index", message_index_}, {"content_index", 0},
                        {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", ojson::array()}}}});
        }
        text_ += e.text;
        out += event("response.output_text.delta",
                     {{"item_id", message_id_}, {"output_index", message_index_}, {"content_index", 0},
                      {"delta", e.text}});
        break;
      case GenEvent::Kind::tool_begin: {
        out += close_reasoning(true);
        out += close_message();
        Call c{"fc_" + random_hex(12), e.tool_id, e.text, {}, next_index_++};
        out += event("response.output_item.added",
                     {{"output_index", c.output_index}, {"item", call_item(c, "in_progress", "")}});
        calls_.push_back(std::move(c));
        break;
      }
      case GenEvent::Kind::tool_args:
        if (!calls_.empty()) calls_.back().args += e.text;
        break;
      case GenEvent::Kind::tool_end:
        if (!calls_.empty()) {
          const Call& c = calls_.back();
          out += event("response.function_call_arguments.delta",
                       {{"item_id", c.item_id}, {"output_index", c.output_index}, {"delta", c.args}});
          out += event("response.function_call_arguments.done",
                       {{"item_id", c.item_id}, {"output_index", c.output_index}, {"arguments", c.args}});
          out += event("response.output_item.done",
                       {{"output_index", c.output_index}, {"item", call_item(c, "completed", c.args)}});
        }
        break;
    }
    return out;
  }

  std::string stream_end(const GenResult& r) override {
    std::string out = close_reasoning(!r.output.unterminated_reasoning);
    out += close_message();
    const char* type = r.finish == FinishReason::length  ? "response.incomplete"
                       : r.finish == FinishReason::error ? "response.failed"
                                                         : "response.completed";
    out += event(type, {{"response", response(r)}});
    return out;
  }

  ojson response(const GenResult& r) override {
    const char* status = r.finish == FinishReason::length  ? "incomplete"
                         : r.finish == FinishReason::error ? "failed"
                                                           : "completed";
    ojson env = envelope(status);
    if (r.finish == FinishReason::length) env["incomplete_details"] = {{"reason", "max_tokens"}};
    if (r.finish == FinishReason::error) env["error"] = {{"code", "server_error"}, {"message", r.error}};
    ojson output = ojson::array();
    const auto& o = r.output;
    if (summary_ && !o.reasoning_content.empty())
      output.push_back({{"id", reasoning_id_.empty() ? "rs_" + random_hex(12) : reasoning_id_},
                        {"type", "reasoning"},
                        {"status", o.unterminated_reasoning ? "incomplete" : "completed"},
                        {"summary", ojson::array({{{"type", "summary_text"}, {"text", o.reasoning_content}}})}});
    if (!o.content.empty())
      output.push_back(message_item(message_id_.empty() ? "msg_" + random_hex(12) : message_id_, o.content));
    for (size_t i = 0; i < o.tool_calls.size(); ++i) {
      Call c{i < calls_.size() ? calls_[i].item_id : "fc_" + random_hex(12),
             i < r.tool_ids.size() ? r.tool_ids[i] : std::string(), o.tool_calls[i].name,
             o.tool_calls[i].arguments, 0};
      output.push_back(call_item(c, "completed", c.args));
    }
    env["output"] = std::move(output);
    env["usage"] = {{"input_tokens", r.usage.prompt_tokens},
                    {"input_tokens_details", {{"cached_tokens", r.usage.cached_tokens},
                                              {"cache_write_tokens", r.usage.prompt_tokens - r.usage.cached_tokens}}},
                    {"output_tokens", r.usage.completion_tokens},
                    {"output_tokens_details", {{"reasoning_tokens", 0}}},
                    {"total_tokens", r.usage.prompt_tokens + r.usage.completion_tokens}};
    return env;
  }

 private:
  struct Call {
    std::string item_id, call_id, name, args;
    int output_index = 0;
  };

  std::string event(const char* type, ojson fields) {
    ojson e = {{"type", type}, {"sequence_number", seq_++}};
    for (auto& [k, v] : fields.items()) e[k] = v;
    return sse_event(type, e);
  }
  ojson envelope(const char* status) const {
    return {{"id", id_}, {"object", "response"}, {"created_at", created_}, {"status", status},
            {"model", model_}, {"output", ojson::array()}, {"usage", nullptr}};
  }
  static ojson message_item(const std::string& id, const std::string& text) {
    return {{"id", id}, {"type", "message"}, {"status", "completed"}, {"role", "assistant"},
            {"content", ojson::array({{{"type", "output_text"}, {"text", text},
                                       {"annotations", ojson::array()}}})}};
  }
  static ojson call_item(const Call& c, const char* status, const std::string& args) {
    return {{"id", c.item_id}, {"type", "function_call"}, {"status", status},
            {"arguments", args}, {"call_id", c.call_id}, {"name", c.name}};
  }
  std::string close_reasoning(bool completed) {
    if (!reasoning_open_) return {};
    reasoning_open_ = false;
    std::string out;
    out += event("response.reasoning_summary_text.done",
                 {{"item_id", reasoning_id_}, {"output_index", reasoning_index_}, {"summary_index", 0},
                  {"text", reasoning_}});
    out += event("response.reasoning_summary_part.done",
                 {{"item_id", reasoning_id_}, {"output_index", reasoning_index_}, {"summary_index", 0},
                  {"part", {{"type", "summary_text"}, {"text", reasoning_}}}});
    out += event("response.output_item.done",
                 {{"output_index", reasoning_index_},
                  {"item", {{"id", reasoning_id_}, {"type", "reasoning"},
                            {"status", completed ? "completed" : "incomplete"},
                            {"summary", ojson::array({{{"type", "summary_text"}, {"text", reasoning_}}})}}}});
    return out;
  }
  std::string close_message() {
    if (!message_open_) return {};
    message_open_ = false;
    std::string out;
    out += event("response.output_text.done",
                 {{"item_id", message_id_}, {"output_index", message_index_}, {"content_index", 0},
                  {"text", text_}});
    out += event("response.content_part.done",
                 {{"item_id", message_id_}, {"output_index", message_index_}, {"content_index", 0},
                  {"part", {{"type", "output_text"}, {"text", text_}, {"annotations", ojson::array()}}}});
    out += event("response.output_item.done",
                 {{"output_index", message_index_}, {"item", message_item(message_id_, text_)}});
    return out;
  }

  std::string id_;
  int64_t created_ = 0;
  bool summary_ = false;
  int64_t seq_ = 0;
  int next_index_ = 0;
  bool reasoning_open_ = false, message_open_ = false;
  int reasoning_index_ = 0, message_index_ = 0;
  std::string reasoning_id_, message_id_, reasoning_, text_;
  std::vector<Call> calls_;
};

}  // namespace

std::unique_ptr<Adapter> make_responses(const ojson& body, const ServerInfo& info) {
  return std::make_unique<Responses>(body, info);
}

}  // namespace ds4::server
