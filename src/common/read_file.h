// Whole-file reads shared by the binaries and tools: plain, or with a `.zst` file decompressed
// (the committed tokenizer and ds4-nano weights are zstd frames of known size).
#pragma once

#include <zstd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "common/error.h"

namespace ds4 {

/// The bytes of `path`. Throws ds4::Error "<path>: cannot open".
inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// read_file, then, when the name ends in ".zst", the decompressed content of its one zstd
/// frame (whose size must be recorded and at most 1 GiB). Throws ds4::Error for an unreadable
/// file, a frame of unknown size, or corrupt data.
inline std::string read_file_maybe_zstd(const std::string& path) {
  std::string data = read_file(path);
  if (!path.ends_with(".zst")) return data;
  const auto size = ZSTD_getFrameContentSize(data.data(), data.size());
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN || size > (1u << 30))
    fail("{}: not a zstd file with a known size", path);
  std::string out(size, '\0');
  const size_t got = ZSTD_decompress(out.data(), out.size(), data.data(), data.size());
  if (ZSTD_isError(got) || got != size) fail("{}: zstd decompression failed", path);
  return out;
}

}  // namespace ds4
