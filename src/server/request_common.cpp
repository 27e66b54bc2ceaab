#include "server/request_common.h"

#include "server/kv_disk_cache.h"

#include <cmath>

#include "common/error.h"
#include "server/api_error.h"

namespace ds4::server {
namespace {

[[noreturn]] void bad(const std::string& message) { throw ApiError(400, message); }

// Nesting depth of JSON text, counting brackets outside strings; stops early past `limit`.
int json_depth(std::string_view text, int limit) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escape = false;
  for (char c : text) {
    if (in_string) {
      if (escape) escape = false;
      else if (c == '\\') escape = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth) max_depth = depth;
      if (max_depth > limit) return max_depth;
    } else if (c == ']' || c == '}') --depth;
  }
  return max_depth;
}

double read_number(const ojson& body, std::string_view key, double fallback, double lo, double hi) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_number()) bad(std::string(key) + " must be a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    bad(std::string(key) + " must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return v;
}

bool listed(const std::vector<std::string_view>& keys, std::string_view k) {
  for (auto x : keys)
    if (x == k) return true;
  return false;
}

}  // namespace

ojson parse_json_body(std::string_view body) {
  if (json_depth(body, kMaxJsonDepth) > kMaxJsonDepth)
    bad("invalid JSON request: nesting deeper than 256 levels");
  ojson j = ojson::parse(body, nullptr, false);
  if (j.is_discarded()) bad("invalid JSON request");
  if (!j.is_object()) bad("invalid JSON request: the body must be a JSON object");
  return j;
}

std::optional<std::string> read_effort(const ojson& value, std::string_view field) {
  if (value.is_null()) return std::nullopt;
  if (!value.is_string()) bad(std::string(field) + " must be a string");
  const auto s = value.get<std::string>();
  for (const char* ok : {"max", "xhigh", "high", "medium", "low", "minimal", "none"})
    if (s == ok) return s;
  bad("invalid " + std::string(field) + " \"" + s +
      "\" (expected max, xhigh, high, medium, low, minimal or none)");
}

void read_thinking_switch(const ojson& body, ThinkingRequest& t) {
  if (const auto it = body.find("thinking"); it != body.end() && !it->is_null()) {
    if (it->is_boolean()) {
      t.explicit_switch = true;
      t.enabled = it->get<bool>();
    } else if (it->is_object()) {
      const auto type = it->find("type");
      if (type == it->end() || !type->is_string()) bad("thinking.type must be a string");
      const auto s = type->get<std::string>();
      if (s == "enabled" || s == "adaptive") t.enabled = true;
      else if (s == "disabled") t.enabled = false;
      else bad("invalid thinking.type \"" + s + "\" (expected enabled or disabled)");
      t.explicit_switch = true;
    } else {
      bad("thinking must be an object {\"type\": \"enabled\"|\"disabled\"}");
    }
  }
  if (const auto it = body.find("think"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) bad("think must be a boolean");
    t.explicit_switch = true;
    t.enabled = it->get<bool>();
  }
}

chat::ThinkMode resolve_think_mode(const ThinkingRequest& t, const std::string& model, int64_t ctx) {
  bool enabled = t.enabled;
  if (!t.explicit_switch) {
    if (model == "deepseek-chat") enabled = false;
    else if (model == "deepseek-reasoner") enabled = true;
  }
  chat::ThinkMode mode = chat::ThinkMode::thinking;
  if (!enabled || t.effort == "none") mode = chat::ThinkMode::chat;
  else if (t.effort == "max") mode = chat::ThinkMode::max;
  return chat::effective_think_mode(mode, ctx);
}

SamplerSettings read_sampling(const ojson& body, bool thinking,
                              const std::vector<std::string_view>& keys) {
  SamplerSettings s;  // temperature 1, top_p 1, min_p 0.05, top_k 0, seed 0
  // Read (and validate) everything even in thinking mode, so a bad value is always reported.
  SamplerSettings c = s;
  if (listed(keys, "temperature"))
    c.temperature = static_cast<float>(read_number(body, "temperature", 1.0, 0.0, 100.0));
  if (listed(keys, "top_p")) c.top_p = static_cast<float>(read_number(body, "top_p", 1.0, 0.0, 1.0));
  if (listed(keys, "min_p")) c.min_p = static_cast<float>(read_number(body, "min_p", 0.05, 0.0, 1.0));
  if (listed(keys, "top_k")) {
    const double k = read_number(body, "top_k", 0, 0, 1e9);
    if (k != std::floor(k)) bad("top_k must be an integer");
    c.top_k = static_cast<int>(k);
  }
  if (listed(keys, "seed")) {
    const auto it = body.find("seed");
    if (it != body.end() && !it->is_null()) {
      if (!it->is_number_integer() || (!it->is_number_unsigned() && it->get<int64_t>() < 0))
        bad("seed must be a non-negative integer");
      c.seed = it->get<uint64_t>();
    }
  }
  if (thinking) {
    s.seed = c.seed;
    return s;
  }
  return c;
}

int64_t read_max_tokens(const ojson& body, const std::vector<std::string_view>& keys,
                        int64_t fallback) {
  for (auto k : keys) {
    const auto it = body.find(k);
    if (it == body.end() || it->is_null()) continue;
    if (!it->is_number_integer()) bad(std::string(k) + " must be an integer");
    if (!it->is_number_unsigned() && it->get<int64_t>() < 1) bad(std::string(k) + " must be at least 1");
    const uint64_t v = it->get<uint64_t>();
    if (v < 1) bad(std::string(k) + " must be at least 1");
    return v > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(v);
  }
  return fallback;
}

std::vector<std::string> read_stop(const ojson& value, std::string_view field) {
  std::vector<std::string> out;
  if (value.is_null()) return out;
  if (value.is_string()) {
    out.push_back(value.get<std::string>());
    return out;
  }
  if (!value.is_array()) bad(std::string(field) + " must be a string or an array of strings");
  for (const auto& v : value) {
    if (!v.is_string()) bad(std::string(field) + " must be a string or an array of strings");
    out.push_back(v.get<std::string>());
  }
  return out;
}

bool read_bool(const ojson& body, std::string_view key, bool fallback) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) bad(std::string(key) + " must be a boolean");
  return it->get<bool>();
}

std::string read_string(const ojson& body, std::string_view key, std::string fallback) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_string()) bad(std::string(key) + " must be a string");
  return it->get<std::string>();
}

std::string content_text(const ojson& content, std::string_view where) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(std::string(where) + " must be a string, null or an array of parts");
  std::string out;
  for (const auto& part : content) {
    if (!part.is_object()) bad(std::string(where) + " parts must be objects");
    const auto t = part.find("text");
    if (t == part.end()) continue;
    if (!t->is_string()) bad(std::string(where) + " part text must be a string");
    out += t->get_ref<const std::string&>();
  }
  return out;
}

std::vector<int32_t> tokenize_prompt(const ServerInfo& info, std::string_view text,
                                     std::string_view param) {
  auto tokens = info.tokenizer->encode_with_specials(text);
  const auto n = static_cast<int64_t>(tokens.size());
  if (n >= info.ctx) {
    ApiError e(400,
               "Prompt has " + std::to_string(n) + " tokens, but the configured context size is " +
                   std::to_string(info.ctx) + " tokens",
               "context_length_exceeded", std::string(param));
    e.n_prompt_tokens = n;
    e.n_ctx = info.ctx;
    throw e;
  }
  return tokens;
}

namespace {

// Ids of assistant tool calls the memory does not know: look for them in the disk snapshots.
void learn_tool_ids_from_disk(const ojson& messages, const ServerInfo& info) {
  if (!messages.is_array()) return;
  std::vector<std::string> unknown;
  for (const auto& m : messages) {
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (const auto& c : m["tool_calls"])
      if (c.is_object() && c.contains("id") && c["id"].is_string() && !info.tool_memory->has(c["id"]))
        unknown.push_back(c["id"].get<std::string>());
  }
  if (unknown.empty()) return;
  for (const auto& block : KvDiskCache::scan_tool_ids(info.kv_disk_dir, unknown))
    info.tool_memory->remember(block);
}

}  // namespace

std::vector<int32_t> render_and_tokenize(const ServerInfo& info, const ojson& conversation,
                                         chat::ThinkMode mode, std::string_view param,
                                         std::string* rendered) {
  chat::RenderOptions ro;
  ro.think_mode = mode;
  ro.ctx = info.ctx;
  std::string text;
  try {
    if (info.tool_memory && conversation.is_object() && conversation.contains("messages")) {
      ojson replayed = conversation;
      if (!info.kv_disk_dir.empty()) learn_tool_ids_from_disk(replayed["messages"], info);
      apply_exact_replay(replayed["messages"], *info.tool_memory);
      text = chat::render_prompt(replayed, ro);
    } else {
      text = chat::render_prompt(conversation, ro);
    }
  } catch (const Error& e) {
    bad(e.what());
  }
  auto tokens = tokenize_prompt(info, text, param);
  if (rendered) *rendered = std::move(text);
  return tokens;
}

}  // namespace ds4::server
