#include "chat/output_parser.h"

#include "chat/json_text.h"

#include <fmt/format.h>

namespace ds4::chat {
namespace {

constexpr std::string_view kBlockOpens[] = {"<｜DSML｜tool_calls>", "<DSML｜tool_calls>",
                                            "<tool_calls>"};
constexpr DsmlSpelling kBlockSpellings[] = {DsmlSpelling::full, DsmlSpelling::missing_first_bar,
                                            DsmlSpelling::plain};
constexpr size_t kMaxObjectDepth = 8;  // nested-parameter recovery depth limit

bool is_delta(ParseEventKind k) {
  return k == ParseEventKind::reasoning_delta || k == ParseEventKind::content_delta ||
         k == ParseEventKind::tool_args_delta;
}

// Where the earliest marker (or a marker cut off by the end of `text`) starts.
struct Found {
  size_t pos = std::string_view::npos;
  size_t which = 0;
  bool full = false;
};

Found find_marker(std::string_view text, const std::string_view* markers, size_t count) {
  for (size_t i = text.find('<'); i != std::string_view::npos; i = text.find('<', i + 1)) {
    const std::string_view rest = text.substr(i);
    for (size_t m = 0; m < count; ++m) {
      if (rest.substr(0, markers[m].size()) == markers[m]) return {i, m, true};
    }
    for (size_t m = 0; m < count; ++m) {
      if (rest.size() < markers[m].size() && markers[m].substr(0, rest.size()) == rest) {
        return {i, m, false};
      }
    }
  }
  return {};
}

size_t count_spaces(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && is_ascii_space(text[i])) ++i;
  return i;
}

bool is_attr_name_char(char c, bool first) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':') return true;
  return !first && ((c >= '0' && c <= '9') || c == '-' || c == '.');
}

}  // namespace

void apply_parse_event(ParsedOutput& message, const ParseEvent& event) {
  switch (event.kind) {
    case ParseEventKind::reasoning_delta: message.reasoning_content += event.text; break;
    case ParseEventKind::content_delta: message.content += event.text; break;
    case ParseEventKind::tool_call_begin:
      message.tool_calls.push_back({event.text, ""});
      break;
    case ParseEventKind::tool_args_delta:
      message.tool_calls.at(static_cast<size_t>(event.tool_index)).arguments += event.text;
      break;
    case ParseEventKind::tool_call_end:
    case ParseEventKind::finish: break;
  }
}

OutputParser::OutputParser(ParseOptions options) : options_(options) {}

bool OutputParser::inside_tool_block() const {
  return state_ == State::block || state_ == State::invoke || state_ == State::value_string ||
         state_ == State::value_json || state_ == State::value_undecided;
}

bool OutputParser::inside_payload() const {
  if (state_ == State::value_string) return true;
  if (state_ != State::value_json) return false;
  bool in_string = false, escaped = false;
  auto scan = [&](std::string_view text) {
    for (const char c : text) {
      if (escaped) {
        escaped = false;
      } else if (in_string && c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = !in_string;
      }
    }
  };
  scan(json_value_);
  scan(view());  // held back, not yet consumed
  return in_string;
}

void OutputParser::feed(std::string_view chunk, std::vector<ParseEvent>& events) {
  if (finished_) return;
  utf8_.feed(chunk, buf_);
  run(false, events);
}

void OutputParser::finish(std::vector<ParseEvent>& events) {
  if (finished_) return;
  utf8_.finish(buf_);
  run(true, events);
  if (state_ == State::reasoning) result_.unterminated_reasoning = true;
  finished_ = true;
  emit(events, ParseEventKind::finish, "");
}

void OutputParser::run(bool final, std::vector<ParseEvent>& events) {
  while (step(final, events)) {
  }
  buf_.erase(0, pos_);
  pos_ = 0;
}

bool OutputParser::step(bool final, std::vector<ParseEvent>& events) {
  switch (state_) {
    case State::start: return step_start(final);
    case State::reasoning: return step_reasoning(final, events);
    case State::content: return step_content(final, events);
    case State::after_block: return step_after_block(final);
    case State::block: return step_block(final, events);
    case State::invoke: return step_invoke(final, events);
    case State::value_string: return step_value_string(final, events);
    case State::value_json: return step_value_json(final, events);
    case State::value_undecided: return step_value_undecided(final, events);
  }
  return false;
}

void OutputParser::emit(std::vector<ParseEvent>& events, ParseEventKind kind,
                        std::string_view text, int tool_index) {
  if (is_delta(kind) && text.empty()) return;
  ParseEvent ev{kind, std::string(text), tool_index};
  apply_parse_event(result_, ev);
  if (is_delta(kind) && !events.empty() && events.back().kind == kind &&
      events.back().tool_index == tool_index) {
    events.back().text += text;
    return;
  }
  events.push_back(std::move(ev));
}

void OutputParser::emit_args(std::vector<ParseEvent>& events, std::string_view text) {
  emit(events, ParseEventKind::tool_args_delta, text, call_index_);
}

void OutputParser::warn(std::string message) { result_.warnings.push_back(std::move(message)); }

// ---- reasoning / content -------------------------------------------------------------------

bool OutputParser::step_start(bool final) {
  const std::string_view v = view();
  const State initial = options_.starts_in_thinking ? State::reasoning : State::content;
  if (v.substr(0, kThinkStart.size()) == kThinkStart) {
    // A leading <think> is a marker, not text: it opens (or, doubled, re-opens) the reasoning.
    if (options_.starts_in_thinking) warn("doubled <think> at the start of the output ignored");
    pos_ += kThinkStart.size();
    state_ = State::reasoning;
    return true;
  }
  if (v.size() < kThinkStart.size() && kThinkStart.substr(0, v.size()) == v && !final) {
    return false;  // could still become <think>
  }
  state_ = initial;
  return true;
}

bool OutputParser::step_reasoning(bool final, std::vector<ParseEvent>& events) {
  const std::string_view v = view();
  const Found f = find_marker(v, &kThinkEnd, 1);
  if (f.full) {
    emit(events, ParseEventKind::reasoning_delta, v.substr(0, f.pos));
    pos_ += f.pos + kThinkEnd.size();
    state_ = State::content;
    return true;
  }
  const size_t keep = (f.pos == std::string_view::npos || final) ? v.size() : f.pos;
  emit(events, ParseEventKind::reasoning_delta, v.substr(0, keep));
  pos_ += keep;
  return false;
}

bool OutputParser::step_content(bool final, std::vector<ParseEvent>& events) {
  const std::string_view v = view();
  const Found f = options_.parse_tool_calls ? find_marker(v, kBlockOpens, 3) : Found{};
  const size_t end = f.pos == std::string_view::npos ? v.size() : f.pos;
  size_t body = end;
  if (options_.parse_tool_calls) {
    while (body > 0 && is_ascii_space(v[body - 1])) --body;  // maybe a separator: held back
  }
  if (f.full) {
    emit(events, ParseEventKind::content_delta, v.substr(0, body));
    block_raw_.assign(v.substr(body, end - body));
    block_raw_ += kBlockOpens[f.which];
    pos_ += end + kBlockOpens[f.which].size();
    enter_block(kBlockSpellings[f.which]);
    return true;
  }
  const size_t keep = final ? v.size() : body;
  emit(events, ParseEventKind::content_delta, v.substr(0, keep));
  pos_ += keep;
  return false;
}

bool OutputParser::step_after_block(bool final) {
  const std::string_view v = view();
  const size_t ws = count_spaces(v);
  pos_ += ws;  // whitespace after a tool block is a separator, not content
  if (ws < v.size()) {
    state_ = State::content;
    return true;
  }
  (void)final;
  return false;
}

// ---- tool-call block -----------------------------------------------------------------------

void OutputParser::enter_block(DsmlSpelling spelling) {
  spelling_ = spelling;
  tag_calls_open_ = dsml_open(spelling, "tool_calls") + ">";
  tag_calls_close_ = dsml_close(spelling, "tool_calls");
  tag_invoke_open_ = dsml_open(spelling, "invoke");
  tag_invoke_close_ = dsml_close(spelling, "invoke");
  tag_param_open_ = dsml_open(spelling, "parameter");
  tag_param_close_ = dsml_close(spelling, "parameter");
  calls_in_block_ = 0;
  state_ = State::block;
}

OutputParser::Tag OutputParser::scan_tag(std::string_view text, std::string_view open) const {
  Tag tag;
  if (text.size() < open.size()) {
    if (open.substr(0, text.size()) == text) tag.status = Tag::partial;
    return tag;
  }
  if (text.substr(0, open.size()) != open) return tag;
  size_t i = open.size();
  if (i == text.size()) {
    tag.status = Tag::partial;
    return tag;
  }
  if (text[i] != '>' && !is_ascii_space(text[i])) return tag;  // a longer name: another tag
  while (true) {
    i += count_spaces(text.substr(i));
    if (i >= text.size()) {
      tag.status = Tag::partial;
      return tag;
    }
    if (text[i] == '>') {
      tag.status = Tag::ok;
      tag.length = i + 1;
      return tag;
    }
    const size_t name_start = i;
    while (i < text.size() && is_attr_name_char(text[i], i == name_start)) ++i;
    if (i == name_start) {
      tag.status = Tag::bad;
      return tag;
    }
    const std::string name(text.substr(name_start, i - name_start));
    i += count_spaces(text.substr(i));
    if (i >= text.size()) {
      tag.status = Tag::partial;
      return tag;
    }
    if (text[i] != '=') {
      tag.status = Tag::bad;
      return tag;
    }
    ++i;
    i += count_spaces(text.substr(i));
    if (i >= text.size()) {
      tag.status = Tag::partial;
      return tag;
    }
    if (text[i] != '"') {
      tag.status = Tag::bad;
      return tag;
    }
    const size_t close = text.find('"', i + 1);
    if (close == std::string_view::npos) {
      tag.status = Tag::partial;
      return tag;
    }
    tag.attrs.emplace_back(name, dsml_attr_unescape(text.substr(i + 1, close - i - 1)));
    i = close + 1;
  }
}

void OutputParser::close_structures(std::vector<ParseEvent>& events) {
  while (!objects_.empty()) {
    emit_args(events, "}");
    objects_.pop_back();
  }
  if (call_index_ >= 0) {
    emit(events, ParseEventKind::tool_call_end, "", call_index_);
    call_index_ = -1;
  }
}

bool OutputParser::block_error(std::vector<ParseEvent>& events, std::string_view reason) {
  if (calls_in_block_ == 0) {
    warn(fmt::format("malformed tool-call block ({}): passed through as content", reason));
    emit(events, ParseEventKind::content_delta, block_raw_);
    block_raw_.clear();
  } else {
    warn(fmt::format("malformed tool-call block ({}): calls so far kept, the rest is content",
                     reason));
    close_structures(events);
  }
  state_ = State::content;
  return true;
}

bool OutputParser::unterminated(std::vector<ParseEvent>& events) {
  result_.unterminated_tool_block = true;
  warn("the text ended inside a tool-call block");
  const std::string_view rest = view();
  if (calls_in_block_ == 0) {
    emit(events, ParseEventKind::content_delta, block_raw_);
    block_raw_.clear();
  } else {
    close_structures(events);
  }
  emit(events, ParseEventKind::content_delta, rest);  // a cut-off tag stays visible
  pos_ = buf_.size();
  state_ = State::content;
  return false;
}

bool OutputParser::step_block(bool final, std::vector<ParseEvent>& events) {
  std::string_view v = view();
  const size_t ws = count_spaces(v);
  if (calls_in_block_ == 0) block_raw_.append(v.substr(0, ws));
  pos_ += ws;
  v = view();
  if (v.empty()) return final ? unterminated(events) : false;
  if (v[0] != '<') return block_error(events, "text between calls");

  bool partial = false;
  if (v.substr(0, tag_calls_close_.size()) == tag_calls_close_) {
    pos_ += tag_calls_close_.size();
    if (calls_in_block_ == 0) {
      warn("tool-call block without calls passed through as content");
      block_raw_ += tag_calls_close_;
      emit(events, ParseEventKind::content_delta, block_raw_);
      block_raw_.clear();
      state_ = State::content;
    } else {
      ++closed_tool_blocks_;
      state_ = State::after_block;
    }
    return true;
  }
  partial |= v.size() < tag_calls_close_.size() && tag_calls_close_.substr(0, v.size()) == v;

  if (v.substr(0, tag_calls_open_.size()) == tag_calls_open_) {
    warn("doubled tool_calls open tag ignored");
    if (calls_in_block_ == 0) block_raw_ += tag_calls_open_;
    pos_ += tag_calls_open_.size();
    return true;
  }
  partial |= v.size() < tag_calls_open_.size() && tag_calls_open_.substr(0, v.size()) == v;

  const Tag tag = scan_tag(v, tag_invoke_open_);
  if (tag.status == Tag::ok) {
    std::string name;
    bool has_name = false;
    for (const auto& [key, value] : tag.attrs) {
      if (key == "name" && !has_name) {
        name = value;
        has_name = true;
      } else {
        warn(fmt::format("unexpected invoke attribute {}=\"{}\" ignored", key, value));
      }
    }
    if (!has_name || name.empty()) return block_error(events, "invoke without a name");
    pos_ += tag.length;
    block_raw_.clear();
    ++calls_in_block_;
    call_index_ = next_call_index_++;
    emit(events, ParseEventKind::tool_call_begin, name, call_index_);
    emit_args(events, "{");
    objects_.assign(1, true);
    state_ = State::invoke;
    return true;
  }
  if (tag.status == Tag::bad) return block_error(events, "malformed invoke tag");
  partial |= tag.status == Tag::partial;
  if (partial) return final ? unterminated(events) : false;
  return block_error(events, "unexpected tag between calls");
}

bool OutputParser::step_invoke(bool final, std::vector<ParseEvent>& events) {
  pos_ += count_spaces(view());
  const std::string_view v = view();
  if (v.empty()) return final ? unterminated(events) : false;
  if (v[0] != '<') return block_error(events, "text between parameters");

  const bool nested = objects_.size() > 1;
  const std::string& closer = nested ? tag_param_close_ : tag_invoke_close_;
  bool partial = false;
  if (v.substr(0, closer.size()) == closer) {
    pos_ += closer.size();
    emit_args(events, "}");
    objects_.pop_back();
    if (objects_.empty()) {
      emit(events, ParseEventKind::tool_call_end, "", call_index_);
      call_index_ = -1;
      state_ = State::block;
    }
    return true;
  }
  partial |= v.size() < closer.size() && closer.substr(0, v.size()) == v;

  const Tag tag = scan_tag(v, tag_param_open_);
  if (tag.status == Tag::ok) return begin_param(tag, events);
  if (tag.status == Tag::bad) return block_error(events, "malformed parameter tag");
  partial |= tag.status == Tag::partial;

  // Missing closers: a new invoke or the block end closes whatever is open.
  if (v.substr(0, tag_invoke_open_.size()) == tag_invoke_open_) {
    warn("missing invoke close tag before the next invoke");
    close_structures(events);
    state_ = State::block;
    return true;
  }
  partial |= v.size() < tag_invoke_open_.size() && tag_invoke_open_.substr(0, v.size()) == v;
  if (v.substr(0, tag_calls_close_.size()) == tag_calls_close_) {
    warn("missing invoke close tag before the block end");
    close_structures(events);
    state_ = State::block;
    return true;
  }
  partial |= v.size() < tag_calls_close_.size() && tag_calls_close_.substr(0, v.size()) == v;
  if (nested && v.substr(0, tag_invoke_close_.size()) == tag_invoke_close_) {
    warn("missing parameter close tag of a nested parameter");
    pos_ += tag_invoke_close_.size();
    close_structures(events);
    state_ = State::block;
    return true;
  }
  partial |= nested && v.size() < tag_invoke_close_.size() &&
             tag_invoke_close_.substr(0, v.size()) == v;

  if (partial) return final ? unterminated(events) : false;
  return block_error(events, "unexpected tag inside an invoke");
}

bool OutputParser::begin_param(const Tag& tag, std::vector<ParseEvent>& events) {
  bool has_name = false;
  std::string name;
  const std::string* type = nullptr;
  for (const auto& [key, value] : tag.attrs) {
    if (key == "name" && !has_name) {
      name = value;
      has_name = true;
    } else if (key == "string" && !type) {
      type = &value;
    } else {
      warn(fmt::format("unexpected parameter attribute {}=\"{}\" ignored", key, value));
    }
  }
  if (!has_name) return block_error(events, "parameter without a name");
  pos_ += tag.length;
  param_name_ = name;
  std::string prefix;
  if (!objects_.back()) prefix += ',';
  objects_.back() = false;
  append_json_string(prefix, name);
  prefix += ':';
  if (type && *type == "false") {
    emit_args(events, prefix);
    json_value_.clear();
    state_ = State::value_json;
  } else if (type) {
    if (*type != "true") {
      warn(fmt::format("parameter \"{}\" has string=\"{}\": read as a string", name, *type));
    }
    prefix += '"';
    emit_args(events, prefix);
    state_ = State::value_string;
  } else {
    emit_args(events, prefix);
    state_ = State::value_undecided;
  }
  return true;
}

// ---- parameter values ----------------------------------------------------------------------

bool OutputParser::step_value_string(bool final, std::vector<ParseEvent>& events) {
  const std::string_view v = view();
  const std::string_view tail = std::string_view(tag_param_close_).substr(1);
  std::string out;
  size_t i = 0;
  size_t run = 0;  // start of the literal text not yet escaped into `out`
  size_t hold = std::string_view::npos;
  bool closed = false;
  while (i < v.size()) {
    const size_t j = v.find_first_of("<&", i);
    if (j == std::string_view::npos) break;
    if (v[j] == '<') {
      const std::string_view rest = v.substr(j);
      if (rest.substr(0, tag_param_close_.size()) == tag_param_close_) {
        append_json_string_body(out, v.substr(run, j - run));
        pos_ += j + tag_param_close_.size();
        closed = true;
        break;
      }
      if (rest.size() < tag_param_close_.size() &&
          std::string_view(tag_param_close_).substr(0, rest.size()) == rest) {
        hold = j;
        break;
      }
    } else {
      const EscapeMatch m = match_escaped_close(v.substr(j), tail);
      if (m.status == EscapeMatch::full) {
        append_json_string_body(out, v.substr(run, j - run));
        if (m.amps == 0) {
          out += '<';
          append_json_string_body(out, tail);
        } else {
          out += '&';
          append_json_string_body(out, v.substr(j + 5, m.length - 5));
        }
        i = run = j + m.length;
        continue;
      }
      if (m.status == EscapeMatch::partial) {
        hold = j;
        break;
      }
    }
    i = j + 1;
  }
  if (closed) {
    out += '"';
    emit_args(events, out);
    state_ = State::invoke;
    return true;
  }
  const size_t keep = (hold == std::string_view::npos || final) ? v.size() : hold;
  append_json_string_body(out, v.substr(run, keep - run));
  pos_ += keep;
  emit_args(events, out);
  if (!final) return false;
  emit_args(events, "\"");
  return unterminated(events);
}

void OutputParser::emit_json_value(std::vector<ParseEvent>& events) {
  if (const auto min = minify_json(json_value_)) {
    emit_args(events, *min);
  } else {
    warn(fmt::format("parameter \"{}\" has string=\"false\" but is not valid JSON: read as a "
                     "string",
                     param_name_));
    std::string s;
    append_json_string(s, json_value_);
    emit_args(events, s);
  }
  json_value_.clear();
}

bool OutputParser::step_value_json(bool final, std::vector<ParseEvent>& events) {
  const std::string_view v = view();
  const size_t close = v.find(tag_param_close_);
  if (close != std::string_view::npos) {
    json_value_.append(v.substr(0, close));
    pos_ += close + tag_param_close_.size();
    emit_json_value(events);
    state_ = State::invoke;
    return true;
  }
  if (final) {
    json_value_.append(v);
    pos_ += v.size();
    emit_json_value(events);
    return unterminated(events);
  }
  // Keep only what could be the start of the close tag.
  const size_t safe = v.size() >= tag_param_close_.size() ? v.size() - (tag_param_close_.size() - 1) : 0;
  json_value_.append(v.substr(0, safe));
  pos_ += safe;
  return false;
}

bool OutputParser::step_value_undecided(bool final, std::vector<ParseEvent>& events) {
  // A parameter without a string attribute: nested parameters make it an object (ds4's loose
  // nested-parameter recovery), anything else makes it a string.
  const std::string_view v = view();
  const size_t ws = count_spaces(v);
  const std::string_view rest = v.substr(ws);
  const std::string_view open = tag_param_open_;
  if (rest.substr(0, open.size()) == open && objects_.size() < kMaxObjectDepth) {
    warn(fmt::format("parameter \"{}\" without a string attribute holds nested parameters: read "
                     "as an object",
                     param_name_));
    pos_ += ws;
    emit_args(events, "{");
    objects_.push_back(true);
    state_ = State::invoke;
    return true;
  }
  if (!final && rest.size() < open.size() && open.substr(0, rest.size()) == rest) return false;
  warn(fmt::format("parameter \"{}\" without a string attribute: read as a string", param_name_));
  emit_args(events, "\"");
  state_ = State::value_string;
  return true;
}

ParsedOutput parse_output(std::string_view text, const ParseOptions& options) {
  OutputParser parser(options);
  std::vector<ParseEvent> events;
  parser.feed(text, events);
  parser.finish(events);
  return parser.result();
}

}  // namespace ds4::chat
