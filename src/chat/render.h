// Prompt rendering identical to DeepSeek's official V4 encoder (encoding/encoding_dsv4.py in the
// DeepSeek-V4 model repository; model-spec §6.6, product-surface §3.4). Plain text out: the
// caller tokenizes it (special tokens are recognized by the rendered-chat tokenizer, spec §6.5).
// docs/chat-encoding.md lists every rule and where ds4's server renderer differs.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace ds4::chat {

/// Thinking mode of a request: `chat` (non-thinking, prompt ends `</think>`), `thinking`
/// (prompt ends `<think>`), `max` (thinking with the Think-Max prefix after BOS).
enum class ThinkMode { chat, thinking, max };

/// Think-Max needs at least this many context tokens; below it max renders as thinking
/// (`ds4_think_mode_for_context`, spec §6.6).
inline constexpr int64_t kThinkMaxMinContext = 393216;

/// `requested`, except max becomes thinking when ctx < kThinkMaxMinContext.
ThinkMode effective_think_mode(ThinkMode requested, int64_t ctx);

/// Parses a think-mode name: "chat" | "nothink" | "none" -> chat; "thinking" | "think" | "high"
/// -> thinking; "max" | "think-max" -> max. Throws ds4::Error for anything else.
ThinkMode parse_think_mode(std::string_view name);

/// "chat", "thinking" or "max".
std::string_view think_mode_name(ThinkMode mode);

/// The exact Think-Max prefix text (spec §6.6), inserted before the first message.
std::string_view think_max_prefix();

/// Options of render_prompt.
struct RenderOptions {
  ThinkMode think_mode = ThinkMode::thinking;
  /// Context size in tokens; only used to downgrade max to thinking (effective_think_mode).
  int64_t ctx = 0;
  /// Official `drop_thinking`: drop the reasoning of assistant turns before the last user
  /// turn (and developer messages before it) in thinking mode. Ignored when any message
  /// carries tools (then all reasoning is kept).
  bool drop_thinking = true;
  /// Append the assistant prefix (`<｜Assistant｜>` + `<think>`/`</think>`, or a task token)
  /// after a final user/developer message. False renders the history only.
  bool add_generation_prompt = true;
};

/// Renders a conversation to the prompt text the official encoder produces (BOS included).
///
/// `conversation` is either an array of messages or an object {"messages": [...],
/// "tools": [...]} (the golden-vector format; top-level tools go to messages[0] when it is a
/// system/developer message, otherwise into a new leading {"role": "system"} message, as vLLM's
/// DeepSeek-V4 adapter does). Use nlohmann::ordered_json: tool schemas and arguments are
/// written in the stored key order, and nlohmann::json would sort the keys.
///
/// Messages (OpenAI style): role system | developer | user | assistant | tool | function |
/// latest_reminder; content: string, null, or an array of {"type": "text", "text": ...} parts
/// (joined with "\n\n"; tool messages also accept other part types as "[Unsupported TYPE]");
/// assistant: reasoning_content (or "reasoning"), tool_calls [{id, type, function: {name,
/// arguments: JSON string or object}}], wo_eos, dsml_raw (ds4 server extension: a non-empty
/// string written verbatim instead of the canonical tool_calls DSML, the exact-replay bytes of
/// product-surface §3.9); system/developer: tools, response_format;
/// any: task (action | query | authority | domain | title | read_url), tool_call_id (tool).
///
/// Throws ds4::Error naming the message index for: a non-array/object conversation, unknown
/// top-level keys, a message that is not an object, an unknown role, content of a wrong type or
/// with a non-text part, tools on a role other than system/developer, an empty developer message,
/// malformed tool_calls (missing function.name), an unknown task, strings that are not UTF-8.
std::string render_prompt(const nlohmann::ordered_json& conversation, const RenderOptions& options);

/// Parses `json_text` (the --render-chat file) into ordered_json and calls render_prompt.
/// Throws ds4::Error for invalid JSON (with the parser's position) and as render_prompt does.
std::string render_prompt_json_text(std::string_view json_text, const RenderOptions& options);

/// The tools section the official encoder appends to a system/developer message after "\n\n":
/// "## Tools\n\n..." + one Python-json schema per line + "...invoke tool calls.\n".
/// `tools` is an array of OpenAI tools ({"type": "function", "function": {...}}) or of bare
/// function schemas. Throws ds4::Error if `tools` is not an array of objects.
std::string render_tools_section(const nlohmann::ordered_json& tools);

/// The DSML block for an assistant message's OpenAI `tool_calls` array, starting with "\n\n"
/// (official `tool_calls_template`): one invoke per call, one parameter per argument in the
/// client's key order, strings raw with string="true", other values as Python json with
/// string="false" (escapes: dsml.h). Arguments that are a string which does not parse to a JSON
/// object become one string parameter named "arguments"; a non-object JSON value becomes one
/// string="false" parameter "arguments"; null or absent arguments render no parameters.
/// Throws ds4::Error if a call lacks function.name.
std::string render_tool_calls_dsml(const nlohmann::ordered_json& tool_calls);

}  // namespace ds4::chat
