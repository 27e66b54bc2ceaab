#include "tokenizer/byte_map.h"

#include <array>

#include "tokenizer/utf8.h"

namespace ds4::tok {
namespace {

bool maps_to_itself(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

struct ByteTables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 512> from_cp{};  // all byte code points are < 0x144
  std::array<std::string, 256> utf8;   // UTF-8 of to_cp[b]
  ByteTables() {
    from_cp.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_cp[b] = maps_to_itself(b) ? static_cast<uint32_t>(b) : next++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
      utf8_append(utf8[b], to_cp[b]);
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) { return tables().to_cp[b]; }

int codepoint_to_byte(uint32_t cp) { return cp < 512 ? tables().from_cp[cp] : -1; }

std::string byte_encode(std::string_view bytes) {
  const ByteTables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.utf8[static_cast<uint8_t>(c)];
  return out;
}

std::optional<std::string> byte_decode(std::string_view encoded) {
  std::string out;
  out.reserve(encoded.size());
  for (size_t pos = 0; pos < encoded.size();) {
    Utf8Scan s = utf8_scan(encoded, pos);
    if (s.kind != Utf8Scan::Kind::kValid) return std::nullopt;
    int b = codepoint_to_byte(s.codepoint);
    if (b < 0) return std::nullopt;
    out += static_cast<char>(b);
    pos += s.length;
  }
  return out;
}

}  // namespace ds4::tok
