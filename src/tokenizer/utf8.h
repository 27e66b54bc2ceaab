// UTF-8 validation and lossy repair shared by the pre-tokenizer and the streaming decoder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ds4::tok {

/// Result of examining the bytes at one position of a byte string.
struct Utf8Scan {
  enum class Kind {
    kValid,      ///< `length` bytes form one well-formed character (Unicode Table 3-7)
    kInvalid,    ///< ill-formed: `length` (>= 1) is the maximal subpart to replace by one U+FFFD
    kTruncated,  ///< the input ends inside a so-far well-formed sequence of `length` bytes
  };
  Kind kind;
  size_t length;
  uint32_t codepoint;  ///< the decoded character when kind == kValid, else 0
};

/// Examines the sequence that starts at `s[pos]` (pos < s.size()). Follows Unicode 15 §3.9 Table
/// 3-7 exactly (no overlongs, no surrogates, nothing above U+10FFFF) and the "maximal subpart"
/// rule for ill-formed input, which is what WHATWG TextDecoder, Python and Rust use.
Utf8Scan utf8_scan(std::string_view s, size_t pos);

/// Index of the first byte at or after `pos` that does not start a well-formed character (or
/// s.size() when the rest is valid). ASCII runs are checked 8 bytes at a time.
size_t utf8_valid_until(std::string_view s, size_t pos = 0);

/// True when all of `s` is well-formed UTF-8.
inline bool utf8_is_valid(std::string_view s) { return utf8_valid_until(s) == s.size(); }

/// Appends the UTF-8 encoding of `cp` (must be <= U+10FFFF and not a surrogate) to `out`.
void utf8_append(std::string& out, uint32_t cp);

/// Lossy repair: a copy of `s` where each maximal subpart of an ill-formed sequence (including a
/// truncated one at the end) is replaced by U+FFFD (EF BF BD). Valid input is returned unchanged.
std::string utf8_sanitize(std::string_view s);

}  // namespace ds4::tok
