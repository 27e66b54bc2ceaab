#include "chat/dsml.h"

namespace ds4::chat {
namespace {

constexpr std::string_view kFullParamTail = "/｜DSML｜parameter>";

// True when `text` starts with `prefix`; `partial` is set when `text` is a proper prefix of it.
bool starts_with_or_partial(std::string_view text, std::string_view prefix, bool& partial) {
  partial = false;
  if (text.size() >= prefix.size()) return text.substr(0, prefix.size()) == prefix;
  partial = prefix.substr(0, text.size()) == text;
  return false;
}

}  // namespace

std::string_view dsml_prefix(DsmlSpelling spelling) {
  switch (spelling) {
    case DsmlSpelling::full: return "｜DSML｜";
    case DsmlSpelling::missing_first_bar: return "DSML｜";
    case DsmlSpelling::plain: return "";
  }
  return "";
}

std::string dsml_open(DsmlSpelling spelling, std::string_view name) {
  std::string s = "<";
  s += dsml_prefix(spelling);
  s += name;
  return s;
}

std::string dsml_close(DsmlSpelling spelling, std::string_view name) {
  std::string s = "</";
  s += dsml_prefix(spelling);
  s += name;
  s += '>';
  return s;
}

void append_dsml_attr_escaped(std::string& out, std::string_view value) {
  for (char c : value) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
}

std::string dsml_attr_unescape(std::string_view value) {
  static constexpr std::pair<std::string_view, char> kEntities[] = {
      {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
  std::string out;
  for (size_t i = 0; i < value.size();) {
    bool matched = false;
    if (value[i] == '&') {
      for (const auto& [entity, c] : kEntities) {
        if (value.substr(i, entity.size()) == entity) {
          out += c;
          i += entity.size();
          matched = true;
          break;
        }
      }
    }
    if (!matched) out += value[i++];
  }
  return out;
}

EscapeMatch match_escaped_close(std::string_view text, std::string_view tail) {
  EscapeMatch m;
  if (text.empty() || text[0] != '&') return m;
  size_t i = 1;
  bool partial = false;
  while (true) {
    if (starts_with_or_partial(text.substr(i), "amp;", partial)) {
      i += 4;
      ++m.amps;
      continue;
    }
    if (partial) {
      m.status = EscapeMatch::partial;
      return m;
    }
    break;
  }
  if (!starts_with_or_partial(text.substr(i), "lt;", partial)) {
    m.status = partial ? EscapeMatch::partial : EscapeMatch::none;
    return m;
  }
  i += 3;
  if (!starts_with_or_partial(text.substr(i), tail, partial)) {
    m.status = partial ? EscapeMatch::partial : EscapeMatch::none;
    return m;
  }
  m.status = EscapeMatch::full;
  m.length = i + tail.size();
  return m;
}

void append_dsml_string_value(std::string& out, std::string_view value) {
  for (size_t i = 0; i < value.size();) {
    const char c = value[i];
    if (c == '<' && value.substr(i + 1, kFullParamTail.size()) == kFullParamTail) {
      out += "&lt;";
      out += kFullParamTail;
      i += 1 + kFullParamTail.size();
      continue;
    }
    if (c == '&') {
      const EscapeMatch m = match_escaped_close(value.substr(i), kFullParamTail);
      if (m.status == EscapeMatch::full) {
        out += "&amp;";
        out.append(value.substr(i + 1, m.length - 1));
        i += m.length;
        continue;
      }
    }
    out += c;
    ++i;
  }
}

std::string dsml_string_value_unescape(std::string_view value, DsmlSpelling spelling) {
  const std::string tail = dsml_close(spelling, "parameter").substr(1);
  std::string out;
  for (size_t i = 0; i < value.size();) {
    if (value[i] == '&') {
      const EscapeMatch m = match_escaped_close(value.substr(i), tail);
      if (m.status == EscapeMatch::full) {
        if (m.amps == 0) {
          out += '<';
          out += tail;
        } else {
          out += '&';
          out.append(value.substr(i + 5, m.length - 5));  // drop one "amp;"
        }
        i += m.length;
        continue;
      }
    }
    out += value[i++];
  }
  return out;
}

void append_dsml_json_value(std::string& out, std::string_view json_text) {
  for (size_t i = 0; i < json_text.size();) {
    if (json_text[i] == '<' &&
        json_text.substr(i + 1, kFullParamTail.size()) == kFullParamTail) {
      out += "\\u003c";
      ++i;
      continue;
    }
    out += json_text[i++];
  }
}

}  // namespace ds4::chat
