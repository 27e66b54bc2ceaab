// Mirrors the official encoder's pipeline: normalize OpenAI messages, merge tool results into
// user turns (merge_tool_messages), sort them by call order (sort_tool_results_by_call_order),
// drop old reasoning (_drop_thinking_messages), then render message by message (render_message)
// including the transition that follows each message.
#include "chat/render.h"

#include "chat/dsml.h"
#include "chat/json_text.h"
#include "chat/text_util.h"
#include "common/error.h"

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

namespace ds4::chat {

using ojson = nlohmann::ordered_json;

namespace {

constexpr std::string_view kThinkMaxPrefix =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";

// Official TOOLS_TEMPLATE with the tokens substituted, split around {tool_schemas}.
constexpr std::string_view kToolsHead =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools "
    "by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE"
    "</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types "
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
    "inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
constexpr std::string_view kToolsTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
    "tool calls.\n";

constexpr std::string_view kResponseFormatHead =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// Quick-instruction task tokens (official DS_TASK_SP_TOKENS).
const std::map<std::string, std::string, std::less<>>& task_tokens() {
  static const std::map<std::string, std::string, std::less<>> tokens = {
      {"action", "<｜action｜>"}, {"query", "<｜query｜>"},   {"authority", "<｜authority｜>"},
      {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"}, {"read_url", "<｜read_url｜>"}};
  return tokens;
}

// Python truthiness of a JSON value (the official encoder tests `if tools:` etc.).
bool truthy(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return false;
    case ojson::value_t::boolean: return v.get<bool>();
    case ojson::value_t::number_integer: return v.get<int64_t>() != 0;
    case ojson::value_t::number_unsigned: return v.get<uint64_t>() != 0;
    case ojson::value_t::number_float: return v.get<double>() != 0.0;
    case ojson::value_t::string: return !v.get_ref<const std::string&>().empty();
    case ojson::value_t::array:
    case ojson::value_t::object: return !v.empty();
    default: return true;
  }
}

struct Block {
  bool tool_result = false;
  std::string text;
  std::string tool_use_id;
};

// One message after normalization; user messages carry blocks after merging.
struct Message {
  std::string role;
  std::string where;  // "messages[i]" of the first input message it came from
  std::string content;
  bool has_blocks = false;
  std::vector<Block> blocks;
  ojson tools;            // array of function schemas, or null
  ojson response_format;  // null when absent/falsy
  ojson tool_calls;       // non-empty array, or null
  std::string dsml_raw;   // ds4 extension: exact sampled block replacing the canonical DSML
  std::string reasoning;
  std::optional<std::string> task;
  bool wo_eos = false;
};

const std::string& require_string(const ojson& v, const std::string& where, const char* what) {
  if (!v.is_string()) fail("chat: {}: {} must be a string, got {}", where, what, v.type_name());
  const auto& s = v.get_ref<const std::string&>();
  if (!is_valid_utf8(s)) fail("chat: {}: {} is not valid UTF-8", where, what);
  return s;
}

// Flattens content (string | null | array of parts). Tool results follow the official
// tool_result rule for non-text parts; other roles reject them.
std::string flatten_content(const ojson& msg, const std::string& where, bool tool_result) {
  const auto it = msg.find("content");
  if (it == msg.end() || it->is_null()) return "";
  if (it->is_string()) return require_string(*it, where, "content");
  if (!it->is_array()) {
    fail("chat: {}: content must be a string, null or an array of parts, got {}", where,
         it->type_name());
  }
  std::string out;
  bool first = true;
  for (size_t i = 0; i < it->size(); ++i) {
    const ojson& part = (*it)[i];
    const std::string pwhere = fmt::format("{}.content[{}]", where, i);
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      fail("chat: {}: a content part must be an object with a string \"type\"", pwhere);
    }
    const std::string& type = part["type"].get_ref<const std::string&>();
    if (!first) out += "\n\n";
    first = false;
    if (type == "text") {
      if (part.contains("text") && !part["text"].is_null()) {
        out += require_string(part["text"], pwhere, "text");
      }
    } else if (tool_result) {
      out += fmt::format("[Unsupported {}]", type);
    } else {
      fail("chat: {}: unsupported content part type \"{}\" (only \"text\")", pwhere, type);
    }
  }
  return out;
}

ojson unwrap_tools(const ojson& tools, const std::string& where) {
  if (!tools.is_array()) fail("chat: {}: tools must be an array, got {}", where, tools.type_name());
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    if (!t.is_object()) fail("chat: {}: tools[{}] must be an object", where, i);
    const auto fn = t.find("function");
    if (fn != t.end()) {
      if (!fn->is_object()) fail("chat: {}: tools[{}].function must be an object", where, i);
      out.push_back(*fn);
    } else {
      out.push_back(t);  // already a bare schema (e.g. Anthropic name/description/input_schema)
    }
  }
  return out;
}

void validate_tool_calls(const ojson& calls, const std::string& where) {
  if (!calls.is_array()) fail("chat: {}: tool_calls must be an array", where);
  for (size_t i = 0; i < calls.size(); ++i) {
    const ojson& c = calls[i];
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
        !c["function"].contains("name") || !c["function"]["name"].is_string()) {
      fail("chat: {}: tool_calls[{}] must be {{\"function\": {{\"name\": string, "
           "\"arguments\": ...}}}}",
           where, i);
    }
    require_string(c["function"]["name"], where, "tool_calls[].function.name");
  }
}

Message normalize(const ojson& m, size_t index) {
  Message msg;
  msg.where = fmt::format("messages[{}]", index);
  if (!m.is_object()) fail("chat: {}: a message must be an object, got {}", msg.where, m.type_name());
  if (!m.contains("role")) fail("chat: {}: missing \"role\"", msg.where);
  msg.role = require_string(m["role"], msg.where, "role");
  static const std::vector<std::string> kRoles = {"system", "developer", "user", "assistant",
                                                  "tool",   "function",  "latest_reminder"};
  if (std::find(kRoles.begin(), kRoles.end(), msg.role) == kRoles.end()) {
    fail("chat: {}: unknown role \"{}\" (expected system, developer, user, assistant, tool, "
         "function or latest_reminder)",
         msg.where, msg.role);
  }
  const bool is_tool = msg.role == "tool" || msg.role == "function";
  msg.content = flatten_content(m, msg.where, is_tool);

  if (const auto it = m.find("tools"); it != m.end() && truthy(*it)) {
    if (msg.role != "system" && msg.role != "developer") {
      fail("chat: {}: tools can only be attached to a system or developer message (the official "
           "encoder ignores them elsewhere)",
           msg.where);
    }
    msg.tools = unwrap_tools(*it, msg.where);
  }
  if (const auto it = m.find("response_format"); it != m.end() && truthy(*it)) {
    msg.response_format = *it;
  }
  if (const auto it = m.find("tool_calls"); it != m.end() && !it->is_null()) {
    if (msg.role != "assistant") fail("chat: {}: tool_calls only belong to assistant messages", msg.where);
    validate_tool_calls(*it, msg.where);
    if (!it->empty()) msg.tool_calls = *it;
  }
  if (const auto it = m.find("dsml_raw"); it != m.end() && !it->is_null()) {
    if (msg.role != "assistant") fail("chat: {}: dsml_raw only belongs to assistant messages", msg.where);
    msg.dsml_raw = require_string(*it, msg.where, "dsml_raw");
  }
  for (const char* key : {"reasoning_content", "reasoning"}) {
    const auto it = m.find(key);
    if (it != m.end() && !it->is_null()) {
      msg.reasoning = require_string(*it, msg.where, key);
      break;
    }
  }
  if (const auto it = m.find("task"); it != m.end() && !it->is_null()) {
    const std::string& task = require_string(*it, msg.where, "task");
    if (!task_tokens().count(task)) {
      fail("chat: {}: invalid task \"{}\" (expected action, query, authority, domain, title or "
           "read_url)",
           msg.where, task);
    }
    msg.task = task;
  }
  if (const auto it = m.find("wo_eos"); it != m.end() && !it->is_null()) {
    if (!it->is_boolean()) fail("chat: {}: wo_eos must be a boolean", msg.where);
    msg.wo_eos = it->get<bool>();
  }
  if (is_tool) {
    if (const auto it = m.find("tool_call_id"); it != m.end() && !it->is_null()) {
      msg.blocks.push_back({true, msg.content, require_string(*it, msg.where, "tool_call_id")});
    } else {
      msg.blocks.push_back({true, msg.content, ""});
    }
  }
  if (msg.role == "developer" && msg.content.empty()) {
    fail("chat: {}: a developer message needs non-empty content", msg.where);
  }
  return msg;
}

// Official merge_tool_messages: tool results become tool_result blocks of a user message,
// consecutive user/tool turns merge into one user message (unless that one has a task).
std::vector<Message> merge_tool_messages(std::vector<Message> in) {
  std::vector<Message> merged;
  for (Message& msg : in) {
    const bool prev_user = !merged.empty() && merged.back().role == "user" && merged.back().has_blocks;
    if (msg.role == "tool" || msg.role == "function") {
      if (prev_user) {
        merged.back().blocks.push_back(msg.blocks.front());
      } else {
        Message user;
        user.role = "user";
        user.where = msg.where;
        user.has_blocks = true;
        user.blocks.push_back(msg.blocks.front());
        merged.push_back(std::move(user));
      }
    } else if (msg.role == "user") {
      Block text{false, msg.content, ""};
      if (prev_user && !merged.back().task) {
        merged.back().blocks.push_back(std::move(text));
      } else {
        // Only role, content, blocks, task and wo_eos survive (official new_msg; mask is unused).
        Message user;
        user.role = "user";
        user.where = msg.where;
        user.content = msg.content;
        user.has_blocks = true;
        user.blocks.push_back(std::move(text));
        user.task = msg.task;
        user.wo_eos = msg.wo_eos;
        merged.push_back(std::move(user));
      }
    } else {
      merged.push_back(std::move(msg));
    }
  }
  return merged;
}

// Official sort_tool_results_by_call_order: within a user message, tool results follow the order
// of the calls of the latest assistant message with tool_calls (unknown ids sort as index 0).
void sort_tool_results_by_call_order(std::vector<Message>& msgs) {
  std::map<std::string, size_t> order;
  for (Message& msg : msgs) {
    if (msg.role == "assistant" && !msg.tool_calls.is_null()) {
      order.clear();
      for (size_t i = 0; i < msg.tool_calls.size(); ++i) {
        const ojson& tc = msg.tool_calls[i];
        std::string id;
        if (tc.contains("id") && tc["id"].is_string()) id = tc["id"].get<std::string>();
        if (id.empty() && tc["function"].contains("id") && tc["function"]["id"].is_string()) {
          id = tc["function"]["id"].get<std::string>();
        }
        if (!id.empty()) order[id] = i;
      }
    } else if (msg.role == "user" && msg.has_blocks) {
      std::vector<Block> tools;
      for (const Block& b : msg.blocks) {
        if (b.tool_result) tools.push_back(b);
      }
      if (tools.size() <= 1 || order.empty()) continue;
      std::stable_sort(tools.begin(), tools.end(), [&](const Block& a, const Block& b) {
        const auto ia = order.find(a.tool_use_id);
        const auto ib = order.find(b.tool_use_id);
        return (ia == order.end() ? 0 : ia->second) < (ib == order.end() ? 0 : ib->second);
      });
      size_t next = 0;
      for (Block& b : msg.blocks) {
        if (b.tool_result) b = tools[next++];
      }
    }
  }
}

int find_last_user_index(const std::vector<Message>& msgs) {
  for (int i = static_cast<int>(msgs.size()) - 1; i >= 0; --i) {
    const std::string& role = msgs[static_cast<size_t>(i)].role;
    if (role == "user" || role == "developer") return i;
  }
  return -1;
}

// Official _drop_thinking_messages: before the last user/developer message, assistant turns lose
// their reasoning and developer messages are removed.
std::vector<Message> drop_thinking_messages(std::vector<Message> msgs) {
  const int last_user = find_last_user_index(msgs);
  std::vector<Message> out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    Message& m = msgs[i];
    const bool keep_role = m.role == "user" || m.role == "system" || m.role == "latest_reminder";
    if (keep_role || static_cast<int>(i) >= last_user) {
      out.push_back(std::move(m));
    } else if (m.role == "assistant") {
      m.reasoning.clear();
      out.push_back(std::move(m));
    }
  }
  return out;
}

std::string render_user_blocks(const Message& msg) {
  std::string out;
  for (size_t i = 0; i < msg.blocks.size(); ++i) {
    if (i) out += "\n\n";
    const Block& b = msg.blocks[i];
    if (b.tool_result) {
      out += "<tool_result>";
      out += b.text;
      out += "</tool_result>";
    } else {
      out += b.text;
    }
  }
  return out;
}

void append_system_extras(std::string& out, const Message& msg) {
  if (!msg.tools.is_null()) {
    out += "\n\n";
    out += render_tools_section(msg.tools);
  }
  if (!msg.response_format.is_null()) {
    out += "\n\n";
    out += kResponseFormatHead;
    out += python_json_dumps(msg.response_format);
  }
}

struct RenderState {
  bool thinking = false;
  bool max_effort = false;
  bool drop_thinking = true;
  bool add_generation_prompt = true;
};

// Official render_message for msgs[index].
std::string render_message(size_t index, const std::vector<Message>& msgs, const RenderState& st) {
  const Message& msg = msgs[index];
  const int last_user = find_last_user_index(msgs);
  std::string out;
  if (index == 0 && st.thinking && st.max_effort) out += kThinkMaxPrefix;

  if (msg.role == "system") {
    out += msg.content;
    append_system_extras(out, msg);
  } else if (msg.role == "developer") {
    out += kUserToken;
    out += msg.content;
    append_system_extras(out, msg);
  } else if (msg.role == "user") {
    out += kUserToken;
    out += msg.has_blocks ? render_user_blocks(msg) : msg.content;
  } else if (msg.role == "latest_reminder") {
    out += kLatestReminderToken;
    out += msg.content;
  } else {  // assistant
    std::string thinking_part;
    const bool prev_has_task = index > 0 && msgs[index - 1].task.has_value();
    if (st.thinking && !prev_has_task &&
        (!st.drop_thinking || static_cast<int>(index) > last_user)) {
      thinking_part = msg.reasoning;
      thinking_part += kThinkEnd;
    }
    out += thinking_part;
    out += msg.content;
    if (!msg.dsml_raw.empty()) {
      out += msg.dsml_raw;  // exact replay of what the model sampled (product-surface §3.9)
    } else if (!msg.tool_calls.is_null()) {
      out += render_tool_calls_dsml(msg.tool_calls);
    }
    if (!msg.wo_eos) out += kEos;
  }

  // Transition to what follows: nothing unless the next message is an assistant or a
  // latest_reminder, or this is the last message.
  if (index + 1 < msgs.size()) {
    const std::string& next = msgs[index + 1].role;
    if (next != "assistant" && next != "latest_reminder") return out;
  } else if (!st.add_generation_prompt) {
    return out;
  }
  if (msg.task) {
    const std::string& token = task_tokens().at(*msg.task);
    if (*msg.task != "action") {
      out += token;
    } else {
      out += kAssistantToken;
      out += st.thinking ? kThinkStart : kThinkEnd;
      out += token;
    }
  } else if (msg.role == "user" || msg.role == "developer" || index + 1 == msgs.size()) {
    // The official encoder adds no prefix after a final system or latest_reminder message, so
    // the model would continue that text (failure-modes item 2: it answers with EOS). Deliberate
    // deviation: a final message of any role but assistant gets the prefix.
    if (msg.role == "assistant") return out;
    out += kAssistantToken;
    if (st.thinking && (!st.drop_thinking || static_cast<int>(index) >= last_user)) {
      out += kThinkStart;
    } else {
      out += kThinkEnd;
    }
  }
  return out;
}

void append_tool_param(std::string& out, std::string_view key, const ojson& value) {
  out += "<｜DSML｜parameter name=\"";
  append_dsml_attr_escaped(out, key);
  if (value.is_string()) {
    out += "\" string=\"true\">";
    const auto& s = value.get_ref<const std::string&>();
    if (!is_valid_utf8(s)) fail("chat: tool call argument \"{}\" is not valid UTF-8", key);
    append_dsml_string_value(out, s);
  } else {
    out += "\" string=\"false\">";
    append_dsml_json_value(out, python_json_dumps(value));
  }
  out += "</｜DSML｜parameter>";
}

}  // namespace

ThinkMode effective_think_mode(ThinkMode requested, int64_t ctx) {
  if (requested == ThinkMode::max && ctx < kThinkMaxMinContext) return ThinkMode::thinking;
  return requested;
}

ThinkMode parse_think_mode(std::string_view name) {
  if (name == "chat" || name == "nothink" || name == "none") return ThinkMode::chat;
  if (name == "thinking" || name == "think" || name == "high") return ThinkMode::thinking;
  if (name == "max" || name == "think-max") return ThinkMode::max;
  fail("unknown think mode \"{}\" (expected chat, thinking or max)", name);
}

std::string_view think_mode_name(ThinkMode mode) {
  switch (mode) {
    case ThinkMode::chat: return "chat";
    case ThinkMode::thinking: return "thinking";
    case ThinkMode::max: return "max";
  }
  return "thinking";
}

std::string_view think_max_prefix() { return kThinkMaxPrefix; }

std::string render_tools_section(const ojson& tools) {
  const ojson schemas = unwrap_tools(tools, "tools");
  std::string out(kToolsHead);
  for (size_t i = 0; i < schemas.size(); ++i) {
    if (i) out += '\n';
    append_python_json(out, schemas[i]);
  }
  out += kToolsTail;
  return out;
}

std::string render_tool_calls_dsml(const ojson& tool_calls) {
  validate_tool_calls(tool_calls, "tool_calls");
  std::string out = "\n\n<｜DSML｜tool_calls>\n";
  for (size_t i = 0; i < tool_calls.size(); ++i) {
    const ojson& fn = tool_calls[i]["function"];
    if (i) out += '\n';
    out += "<｜DSML｜invoke name=\"";
    append_dsml_attr_escaped(out, fn["name"].get_ref<const std::string&>());
    out += "\">\n";
    // Arguments: the official encoder json.loads a string and falls back to one "arguments"
    // parameter holding the raw text; a non-string value falls back the same way (string="false").
    ojson args;
    const auto ait = fn.find("arguments");
    if (ait == fn.end() || ait->is_null()) {
      args = ojson::object();
    } else if (ait->is_string()) {
      const auto& raw = ait->get_ref<const std::string&>();
      ojson parsed = ojson::parse(raw, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_object()) {
        args = std::move(parsed);
      } else {
        args = ojson::object({{"arguments", raw}});
      }
    } else if (ait->is_object()) {
      args = *ait;
    } else {
      args = ojson::object({{"arguments", *ait}});
    }
    bool first = true;
    for (const auto& [key, value] : args.items()) {
      if (!first) out += '\n';
      first = false;
      append_tool_param(out, key, value);
    }
    out += "\n</｜DSML｜invoke>";
  }
  out += "\n</｜DSML｜tool_calls>";
  return out;
}

std::string render_prompt(const ojson& conversation, const RenderOptions& options) {
  const ojson* messages = nullptr;
  const ojson* top_tools = nullptr;
  if (conversation.is_array()) {
    messages = &conversation;
  } else if (conversation.is_object()) {
    for (const auto& [key, value] : conversation.items()) {
      if (key != "messages" && key != "tools") {
        fail("chat: unknown top-level key \"{}\" (expected \"messages\" and optional \"tools\")",
             key);
      }
    }
    const auto it = conversation.find("messages");
    if (it == conversation.end() || !it->is_array()) {
      fail("chat: the conversation object needs a \"messages\" array");
    }
    messages = &*it;
    if (const auto t = conversation.find("tools"); t != conversation.end() && truthy(*t)) {
      top_tools = &*t;
    }
  } else {
    fail("chat: a conversation must be an array of messages or an object with \"messages\", got {}",
         conversation.type_name());
  }

  std::vector<Message> msgs;
  msgs.reserve(messages->size() + 1);
  for (size_t i = 0; i < messages->size(); ++i) msgs.push_back(normalize((*messages)[i], i));
  if (top_tools) {
    ojson tools = unwrap_tools(*top_tools, "tools");
    if (!msgs.empty() && (msgs[0].role == "system" || msgs[0].role == "developer")) {
      msgs[0].tools = std::move(tools);
    } else {
      Message sys;
      sys.role = "system";
      sys.where = "tools";
      sys.tools = std::move(tools);
      msgs.insert(msgs.begin(), std::move(sys));
    }
  }

  msgs = merge_tool_messages(std::move(msgs));
  sort_tool_results_by_call_order(msgs);

  const ThinkMode mode = effective_think_mode(options.think_mode, options.ctx);
  RenderState st;
  st.thinking = mode != ThinkMode::chat;
  st.max_effort = mode == ThinkMode::max;
  st.add_generation_prompt = options.add_generation_prompt;
  st.drop_thinking = options.drop_thinking;
  for (const Message& m : msgs) {
    if (!m.tools.is_null()) st.drop_thinking = false;
  }
  if (st.thinking && st.drop_thinking) msgs = drop_thinking_messages(std::move(msgs));

  std::string out(kBos);
  for (size_t i = 0; i < msgs.size(); ++i) out += render_message(i, msgs, st);
  return out;
}

std::string render_prompt_json_text(std::string_view json_text, const RenderOptions& options) {
  ojson conversation;
  try {
    conversation = ojson::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    fail("chat: invalid JSON conversation: {}", e.what());
  }
  return render_prompt(conversation, options);
}

}  // namespace ds4::chat
