// Byte-level text helpers shared by the chat renderer and the output parser: a streaming UTF-8
// sanitizer (failure-modes item 3: text never leaves the engine as a partial or invalid UTF-8
// character) and JSON string escaping with the exact rules of Python's json.dumps.
#pragma once

#include <string>
#include <string_view>

namespace ds4::chat {

/// U+FFFD REPLACEMENT CHARACTER in UTF-8.
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

/// Streaming UTF-8 sanitizer. Bytes go in in arbitrary chunks; only complete, well-formed UTF-8
/// comes out. An incomplete but so-far-valid sequence at the end of a chunk (at most 3 bytes) is
/// held back until the next feed(). Every maximal ill-formed subpart (Unicode 15 §3.9, "U+FFFD
/// substitution of maximal subparts") becomes one U+FFFD, so the output does not depend on how the
/// input was split. finish() turns a held-back incomplete sequence into one U+FFFD.
class Utf8Sanitizer {
 public:
  /// Appends the well-formed prefix of (held bytes + `bytes`) to `out`.
  void feed(std::string_view bytes, std::string& out);
  /// Flushes the held-back bytes (as U+FFFD) to `out` and resets the sanitizer.
  void finish(std::string& out);

 private:
  std::string pending_;
};

/// Whole-string form of Utf8Sanitizer: feed + finish.
std::string sanitize_utf8(std::string_view bytes);

/// True when `bytes` is entirely well-formed UTF-8.
bool is_valid_utf8(std::string_view bytes);

/// Appends `text` escaped as the body of a JSON string (no quotes), as Python's
/// json.dumps(ensure_ascii=False) does: `"` `\` and the control characters U+0000..U+001F are
/// escaped (\b \f \n \r \t short forms, others \u00xx lowercase); everything else, including
/// non-ASCII and U+007F, is copied. `text` must be valid UTF-8 (callers sanitize first).
void append_json_string_body(std::string& out, std::string_view text);

/// Appends `text` as a quoted JSON string (see append_json_string_body).
void append_json_string(std::string& out, std::string_view text);

/// True for the ASCII whitespace bytes space, \t, \n, \v, \f, \r.
inline bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

}  // namespace ds4::chat
