#include "chat/json_text.h"

#include "chat/text_util.h"
#include "common/error.h"

#include <charconv>
#include <cmath>
#include <system_error>

namespace ds4::chat {

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value < 0 ? "-Infinity" : "Infinity";
  // Shortest round-trip digits in scientific form, e.g. "-1.2345e+02" or "5e-324".
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  const size_t epos = sci.find('e');
  std::string_view mant = sci.substr(0, epos);
  const int exp = std::stoi(std::string(sci.substr(epos + 1)));
  std::string out;
  if (!mant.empty() && mant[0] == '-') {
    out += '-';
    mant.remove_prefix(1);
  }
  std::string digits;  // significant digits without the decimal point
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  if (exp >= -4 && exp < 16) {
    const int point = exp + 1;  // digits before the decimal point
    if (point <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-point), '0');
      out += digits;
    } else if (static_cast<size_t>(point) >= digits.size()) {
      out += digits;
      out.append(static_cast<size_t>(point) - digits.size(), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(point));
      out += '.';
      out += digits.substr(static_cast<size_t>(point));
    }
    return out;
  }
  out += digits[0];
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  out += 'e';
  out += exp < 0 ? '-' : '+';
  const int mag = exp < 0 ? -exp : exp;
  if (mag < 10) out += '0';
  out += std::to_string(mag);
  return out;
}

void append_python_json(std::string& out, const nlohmann::ordered_json& value) {
  using Type = nlohmann::ordered_json::value_t;
  switch (value.type()) {
    case Type::null: out += "null"; return;
    case Type::boolean: out += value.get<bool>() ? "true" : "false"; return;
    case Type::number_integer: out += std::to_string(value.get<int64_t>()); return;
    case Type::number_unsigned: out += std::to_string(value.get<uint64_t>()); return;
    case Type::number_float: out += python_float_repr(value.get<double>()); return;
    case Type::string: {
      const auto& s = value.get_ref<const std::string&>();
      if (!is_valid_utf8(s)) fail("chat: JSON string is not valid UTF-8");
      append_json_string(out, s);
      return;
    }
    case Type::array: {
      out += '[';
      bool first = true;
      for (const auto& item : value) {
        if (!first) out += ", ";
        first = false;
        append_python_json(out, item);
      }
      out += ']';
      return;
    }
    case Type::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += ", ";
        first = false;
        if (!is_valid_utf8(key)) fail("chat: JSON object key is not valid UTF-8");
        append_json_string(out, key);
        out += ": ";
        append_python_json(out, item);
      }
      out += '}';
      return;
    }
    case Type::binary:
    case Type::discarded: break;
  }
  fail("chat: cannot serialize a binary or discarded JSON value");
}

std::string python_json_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  append_python_json(out, value);
  return out;
}

std::optional<std::string> minify_json(std::string_view text) {
  if (!nlohmann::json::accept(text)) return std::nullopt;
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\') {
        out += text[++i];  // valid JSON: an escape always has its next byte
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
      out += c;
    } else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
      out += c;
    }
  }
  return out;
}

}  // namespace ds4::chat
