// The DeepSeek V3/V4 pre-tokenizer, done exactly with PCRE2 (UTF + UCP + JIT). Spec §6.4 describes
// ds4.c's hand-written approximation; this is the official rule set it approximates.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::tok {

/// The split regexes of DeepSeek's tokenizer.json `pre_tokenizer`, byte for byte as that file lists
/// them: a Sequence of three `Split` steps (behaviour "Isolated", invert false) applied in this
/// order, followed by ByteLevel(use_regex = false), which only byte-encodes. Step 1 isolates runs of
/// 1-3 digits, step 2 runs of CJK ideographs / kana, step 3 is the GPT-style word pattern.
inline constexpr std::string_view kSplitPatterns[3] = {
    R"(\p{N}{1,3})",
    "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+",  // [一-龥぀-ゟ゠-ヿ]+
    // The "\r\n" here are real CR LF characters, as in the JSON file (a JSON escape there).
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^)" "\r\n" R"(\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[)"
    "\r\n" R"(]*|\s*[)" "\r\n" R"(]+|\s+(?!\S)|\s+)",
};

/// The white-space set that `\s` denotes in the reference (ECMAScript, `RegExp` with flag `u`):
/// TAB LF VT FF CR SPACE NBSP U+1680 U+2000-U+200A U+2028 U+2029 U+202F U+205F U+3000 U+FEFF,
/// written as the inside of a PCRE2 character class.
inline constexpr std::string_view kJsWhiteSpaceClass =
    R"(\t\n\x{0B}\f\r\x{20}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF})";

/// Rewrites one tokenizer.json split pattern into the PCRE2 pattern that is compiled: `\s` becomes
/// `[kJsWhiteSpaceClass]` and `\S` its negation, everything else is copied. PCRE2's own `\s` under
/// UCP differs (it adds U+0085 and U+180E and lacks U+FEFF), which would split differently from the
/// JS reference; Rust `tokenizers` (Oniguruma) adds U+0085 and lacks U+FEFF. Throws ds4::Error when
/// `\s`/`\S` appears inside a character class (no DeepSeek pattern does that).
std::string to_pcre2_pattern(std::string_view hf_pattern);

/// Splits text into pre-token pieces with the kSplitPatterns sequence. Sequence semantics: each
/// step runs its regex over every piece the previous step produced, separately (a lookahead never
/// sees past the piece), and keeps both the matches and the unmatched gaps as pieces ("Isolated").
///
/// Invalid UTF-8 (decided here; the JS reference cannot hold such input): the text is cut into
/// maximal well-formed runs and ill-formed bytes; each run is split as above, and every byte of an
/// ill-formed sequence (maximal subpart, Unicode §3.9) becomes a piece of its own, so it still
/// encodes as its byte token and decodes back to the same byte.
///
/// Thread-safe: split() may be called concurrently from several threads.
class PreTokenizer {
 public:
  /// Compiles the three patterns with PCRE2_UTF | PCRE2_UCP and JIT-compiles them (falling back to
  /// the interpreter where PCRE2 has no JIT). Throws ds4::Error if PCRE2 rejects a pattern.
  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  /// Appends the pieces of `text` (any bytes) to `out`, in order; they are non-empty views into
  /// `text` and concatenate to it. Throws ds4::Error only on an internal PCRE2 failure.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

  /// Convenience form of split() returning a new vector.
  std::vector<std::string_view> split(std::string_view text) const;

  /// True when all three patterns run JIT-compiled.
  bool jit_enabled() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4::tok
