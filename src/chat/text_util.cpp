#include "chat/text_util.h"

#include <cstdint>

namespace ds4::chat {
namespace {

// Length of the well-formed UTF-8 sequence a lead byte starts (Unicode Table 3-7), and the
// allowed range of its second byte. Returns 0 for bytes that can never start a sequence.
struct LeadInfo {
  int length;
  uint8_t second_lo;
  uint8_t second_hi;
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Sanitizes `data`; when `final` is false an incomplete valid prefix at the end is returned via
// `held` instead of being replaced.
void sanitize(std::string_view data, bool final, std::string& out, std::string& held) {
  size_t i = 0;
  const size_t n = data.size();
  while (i < n) {
    const uint8_t b = static_cast<uint8_t>(data[i]);
    const LeadInfo info = lead_info(b);
    if (info.length == 1) {
      // Copy the whole ASCII run at once.
      size_t j = i + 1;
      while (j < n && static_cast<uint8_t>(data[j]) < 0x80) ++j;
      out.append(data.substr(i, j - i));
      i = j;
      continue;
    }
    if (info.length == 0) {  // stray continuation byte or C0/C1/F5..FF
      out.append(kReplacementChar);
      ++i;
      continue;
    }
    // Count how many bytes of the sequence are present and valid.
    int valid = 1;
    bool broken = false;
    for (int k = 1; k < info.length; ++k) {
      if (i + k >= n) break;
      const uint8_t c = static_cast<uint8_t>(data[i + k]);
      const uint8_t lo = k == 1 ? info.second_lo : 0x80;
      const uint8_t hi = k == 1 ? info.second_hi : 0xBF;
      if (c < lo || c > hi) {
        broken = true;
        break;
      }
      ++valid;
    }
    if (valid == info.length) {
      out.append(data.substr(i, static_cast<size_t>(valid)));
      i += static_cast<size_t>(valid);
    } else if (broken || final) {
      out.append(kReplacementChar);  // the maximal subpart [i, i+valid) is one U+FFFD
      i += static_cast<size_t>(valid);
    } else {
      held.assign(data.substr(i));  // incomplete at the end of the chunk: wait for more bytes
      return;
    }
  }
  held.clear();
}

}  // namespace

void Utf8Sanitizer::feed(std::string_view bytes, std::string& out) {
  if (pending_.empty()) {
    sanitize(bytes, false, out, pending_);
    return;
  }
  std::string data = std::move(pending_);
  data.append(bytes);
  pending_.clear();
  sanitize(data, false, out, pending_);
}

void Utf8Sanitizer::finish(std::string& out) {
  std::string data = std::move(pending_);
  pending_.clear();
  std::string unused;
  sanitize(data, true, out, unused);
}

std::string sanitize_utf8(std::string_view bytes) {
  std::string out;
  std::string unused;
  sanitize(bytes, true, out, unused);
  return out;
}

bool is_valid_utf8(std::string_view bytes) {
  return sanitize_utf8(bytes) == bytes;
}

void append_json_string_body(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  size_t run = 0;  // start of the pending run of bytes that need no escaping
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(text.substr(run, i - run));
    run = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 15];
    }
  }
  out.append(text.substr(run));
}

void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  append_json_string_body(out, text);
  out += '"';
}

}  // namespace ds4::chat
