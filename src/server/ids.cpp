#include "server/ids.h"

#include <cstdio>
#include <vector>

#include "common/error.h"

namespace ds4::server {

std::string random_hex(size_t n_bytes) {
  std::vector<unsigned char> bytes(n_bytes);
  std::FILE* f = std::fopen("/dev/urandom", "rb");
  if (!f) fail("cannot open /dev/urandom for random ids");
  const size_t got = std::fread(bytes.data(), 1, n_bytes, f);
  std::fclose(f);
  if (got != n_bytes) fail("short read from /dev/urandom ({} of {} bytes)", got, n_bytes);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n_bytes);
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

std::string new_tool_id(std::string_view prefix) { return std::string(prefix) + random_hex(16); }

}  // namespace ds4::server
