#include "tokenizer/utf8.h"

#include <cstring>

namespace ds4::tok {
namespace {

// Allowed range of the second byte for each lead byte (Unicode Table 3-7); later bytes are 80..BF.
struct Lead {
  uint8_t length;  // 0: not a lead byte
  uint8_t lo, hi;  // range of the second byte
};

Lead lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

Utf8Scan utf8_scan(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  const uint8_t b0 = p[pos];
  const Lead lead = lead_info(b0);
  if (lead.length == 1) return {Utf8Scan::Kind::kValid, 1, b0};
  if (lead.length == 0) return {Utf8Scan::Kind::kInvalid, 1, 0};
  uint32_t cp = b0 & (0xFF >> (lead.length + 1));
  for (size_t k = 1; k < lead.length; ++k) {
    if (pos + k >= n) return {Utf8Scan::Kind::kTruncated, k, 0};
    const uint8_t b = p[pos + k];
    const uint8_t lo = k == 1 ? lead.lo : 0x80;
    const uint8_t hi = k == 1 ? lead.hi : 0xBF;
    if (b < lo || b > hi) return {Utf8Scan::Kind::kInvalid, k, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Scan::Kind::kValid, lead.length, cp};
}

size_t utf8_valid_until(std::string_view s, size_t pos) {
  const size_t n = s.size();
  while (pos < n) {
    // Fast path: 8 ASCII bytes at once.
    if (pos + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s.data() + pos, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        pos += 8;
        continue;
      }
    }
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    Utf8Scan sc = utf8_scan(s, pos);
    if (sc.kind != Utf8Scan::Kind::kValid) return pos;
    pos += sc.length;
  }
  return n;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t good = utf8_valid_until(s, pos);
    out.append(s.substr(pos, good - pos));
    if (good == s.size()) break;
    out += "\xEF\xBF\xBD";
    pos = good + utf8_scan(s, good).length;
  }
  return out;
}

}  // namespace ds4::tok
