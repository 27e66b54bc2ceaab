// Test helper: a byte-level GGUF builder independent of gguf::Writer, used to craft valid and
// malformed files field by field. Every append returns the offset where the field starts so
// tests can assert the exact offset named in an error message.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "gguf/reader.h"

namespace ds4::gguf {
/// Lets GoogleTest print values in failure messages.
inline void PrintTo(const Value& v, std::ostream* os) { *os << v.to_string(); }
}  // namespace ds4::gguf

namespace ds4::gguf::testing {

struct Raw {
  std::vector<uint8_t> b;

  size_t size() const { return b.size(); }

  template <typename T>
  size_t put(T x) {
    const size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &x, sizeof(T));
    return at;
  }
  size_t u8(uint8_t x) { return put(x); }
  size_t u32(uint32_t x) { return put(x); }
  size_t u64(uint64_t x) { return put(x); }
  size_t i32(int32_t x) { return put(x); }
  size_t f32(float x) { return put(x); }
  /// u64 length + bytes; returns the offset of the length.
  size_t str(std::string_view s) {
    const size_t at = u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return at;
  }
  /// Header with magic and version 3.
  void header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    u32(0x46554747u);
    u32(version);
    u64(n_tensors);
    u64(n_kv);
  }
  /// Zero bytes up to a multiple of `alignment`.
  void pad(uint64_t alignment) {
    while (b.size() % alignment) b.push_back(0);
  }
  void fill(size_t n, uint8_t v = 0) { b.insert(b.end(), n, v); }

  template <typename T>
  void patch(size_t at, T x) {
    std::memcpy(b.data() + at, &x, sizeof(T));
  }
};

/// Parses `bytes` as "t.gguf" and returns the ds4::Error message; fails the test when parsing
/// succeeds or another exception type escapes.
inline std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    Reader::from_memory(bytes, "t.gguf");
  } catch (const ds4::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-ds4 exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "parse succeeded";
  return "";
}

}  // namespace ds4::gguf::testing
