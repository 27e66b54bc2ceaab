// Parser of generated assistant text: splits it into reasoning, content and DSML tool calls,
// incrementally (feed any chunks, get events) or on the whole text. One state machine owns the
// think/answer boundary for every API and for stream and non-stream alike (failure-modes item
// 1); the whole-text parse is the incremental parse fed in one chunk, and the events do not depend
// on how the text was split (item 5). Recovery rules for malformed output: docs/chat-encoding.md.
#pragma once

#include "chat/dsml.h"
#include "chat/text_util.h"

#include <string>
#include <string_view>
#include <vector>

namespace ds4::chat {

/// Options of OutputParser.
struct ParseOptions {
  /// The prompt ended with `<think>` (thinking mode): the text starts inside the reasoning.
  bool starts_in_thinking = false;
  /// Recognize DSML tool-call blocks in the answer; false leaves them as content (tools off).
  bool parse_tool_calls = true;
};

/// What a ParseEvent reports.
enum class ParseEventKind {
  reasoning_delta,  ///< text of reasoning_content (the <think> wrapper is not included)
  content_delta,    ///< text of the answer
  tool_call_begin,  ///< a call opened: `text` is the tool name, `tool_index` its index (0, 1, ...)
  tool_args_delta,  ///< a fragment of the call's arguments JSON (fragments concatenate to it)
  tool_call_end,    ///< the call's arguments are complete
  finish,           ///< the parser was finished; no event follows
};

/// One parser event. Text is always complete UTF-8 characters.
struct ParseEvent {
  ParseEventKind kind = ParseEventKind::content_delta;
  std::string text;
  int tool_index = -1;  ///< for tool events, else -1
  bool operator==(const ParseEvent&) const = default;
};

/// A parsed tool call; `arguments` is a minified JSON object string (OpenAI `arguments`).
struct ParsedToolCall {
  std::string name;
  std::string arguments;
  bool operator==(const ParsedToolCall&) const = default;
};

/// The assistant message assembled from the events.
struct ParsedOutput {
  std::string reasoning_content;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  /// The text ended inside the reasoning (no `</think>`); everything went to reasoning_content.
  bool unterminated_reasoning = false;
  /// The text ended inside a tool-call block (product-surface: finish "error", "unterminated
  /// tool call"); open values, objects and calls were closed so the arguments are valid JSON.
  bool unterminated_tool_block = false;
  /// One line per recovery rule applied (malformed output), in order.
  std::vector<std::string> warnings;
  bool operator==(const ParsedOutput&) const = default;
};

/// Adds `event` to `message` (appends deltas, opens calls); used by OutputParser itself.
void apply_parse_event(ParsedOutput& message, const ParseEvent& event);

/// Incremental parser of one generated assistant turn (the text after the prompt, without the
/// EOS token). Input bytes may split anywhere, including inside UTF-8 characters and markers;
/// invalid UTF-8 becomes U+FFFD (Utf8Sanitizer). Text that could still turn out to be a marker,
/// separator whitespace before a tool block, or an incomplete tag, escape or character is held
/// back until it is decided. Never throws on any input.
class OutputParser {
 public:
  explicit OutputParser(ParseOptions options = {});

  /// Parses `chunk` and appends the resulting events to `events` (adjacent deltas of one kind
  /// are merged). Must not be called after finish().
  void feed(std::string_view chunk, std::vector<ParseEvent>& events);

  /// Ends the text: decides everything held back, closes what is open, appends the last events
  /// and a `finish` event. Calling it twice appends nothing the second time.
  void finish(std::vector<ParseEvent>& events);

  /// The message assembled so far (complete after finish()).
  const ParsedOutput& result() const { return result_; }

  /// True while the parser is inside a tool-call block (between its open and close tags).
  bool inside_tool_block() const;

  /// True while the text fed so far ends inside a parameter's payload: the body of a
  /// string="true" parameter, or a JSON string inside a string="false" value. Every other byte of
  /// a tool-call block is structural (tags, headers, JSON punctuation, numbers); the server
  /// samples those greedily (product-surface §3.3).
  bool inside_payload() const;

  /// Number of tool-call blocks with at least one call that have been closed. The server stops
  /// generation once this becomes non-zero (product-surface §3.7: finish `tool_calls`).
  int closed_tool_blocks() const { return closed_tool_blocks_; }

 private:
  enum class State { start, reasoning, content, after_block, block, invoke, value_string,
                     value_json, value_undecided };
  enum class Match { none, partial, full };

  struct Tag {
    enum Status { none, partial, bad, ok } status = none;
    size_t length = 0;
    std::vector<std::pair<std::string, std::string>> attrs;
  };

  std::string_view view() const { return std::string_view(buf_).substr(pos_); }
  void run(bool final, std::vector<ParseEvent>& events);
  bool step(bool final, std::vector<ParseEvent>& events);
  bool step_start(bool final);
  bool step_reasoning(bool final, std::vector<ParseEvent>& events);
  bool step_content(bool final, std::vector<ParseEvent>& events);
  bool step_after_block(bool final);
  bool step_block(bool final, std::vector<ParseEvent>& events);
  bool step_invoke(bool final, std::vector<ParseEvent>& events);
  bool step_value_string(bool final, std::vector<ParseEvent>& events);
  bool step_value_json(bool final, std::vector<ParseEvent>& events);
  bool step_value_undecided(bool final, std::vector<ParseEvent>& events);

  void emit(std::vector<ParseEvent>& events, ParseEventKind kind, std::string_view text,
            int tool_index = -1);
  void emit_args(std::vector<ParseEvent>& events, std::string_view text);
  void warn(std::string message);
  void enter_block(DsmlSpelling spelling);
  bool begin_param(const Tag& tag, std::vector<ParseEvent>& events);
  void emit_json_value(std::vector<ParseEvent>& events);
  void close_structures(std::vector<ParseEvent>& events);
  bool block_error(std::vector<ParseEvent>& events, std::string_view reason);
  bool unterminated(std::vector<ParseEvent>& events);
  Tag scan_tag(std::string_view text, std::string_view open) const;

  ParseOptions options_;
  Utf8Sanitizer utf8_;
  std::string buf_;  // sanitized, not yet consumed text starts at pos_
  size_t pos_ = 0;
  State state_ = State::start;
  bool finished_ = false;
  ParsedOutput result_;

  // The open tool-call block.
  DsmlSpelling spelling_ = DsmlSpelling::full;
  std::string tag_calls_open_, tag_calls_close_, tag_invoke_open_, tag_invoke_close_,
      tag_param_open_, tag_param_close_;
  std::string block_raw_;  // raw block text while no call of it has begun (pass-through)
  int calls_in_block_ = 0;
  int closed_tool_blocks_ = 0;
  int next_call_index_ = 0;
  int call_index_ = -1;            // the open call, or -1
  std::vector<bool> objects_;      // open JSON objects of the call; true = no member yet
  std::string param_name_;         // the open parameter
  std::string json_value_;         // raw text of an open string="false" value
};

/// Parses a whole generated text: OutputParser fed once, then finished.
ParsedOutput parse_output(std::string_view text, const ParseOptions& options = {});

}  // namespace ds4::chat
