// DeepSeek V4 chat-template markers and the DSML tool-call syntax (model-spec §6.5-6.6,
// product-surface §3.4): the literal strings, the three spellings the output parser accepts, and
// the escaping rules shared by the renderer (JSON -> DSML) and the parser (DSML -> JSON).
#pragma once

#include <string>
#include <string_view>

namespace ds4::chat {

// Special-token strings (U+FF5C FULLWIDTH VERTICAL LINE bars, U+2581 word separators).
inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUserToken = "<｜User｜>";
inline constexpr std::string_view kAssistantToken = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminderToken = "<｜latest_reminder｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsmlToken = "｜DSML｜";

/// How the DSML tag prefix is written. The renderer always writes `full`; the parser accepts all
/// three (product-surface §3.4): `<｜DSML｜tool_calls>`, `<DSML｜tool_calls>` (first bar missing)
/// and plain XML `<tool_calls>`. One block uses one spelling throughout.
enum class DsmlSpelling { full, missing_first_bar, plain };

/// The text between `<` (or `</`) and the element name for `spelling`: "｜DSML｜", "DSML｜", "".
std::string_view dsml_prefix(DsmlSpelling spelling);

/// `<PREFIXname` (opening, no `>`), e.g. dsml_open(full, "invoke") == "<｜DSML｜invoke".
std::string dsml_open(DsmlSpelling spelling, std::string_view name);

/// `</PREFIXname>`, e.g. dsml_close(full, "parameter") == "</｜DSML｜parameter>".
std::string dsml_close(DsmlSpelling spelling, std::string_view name);

/// Appends an attribute value with `&`, `<`, `>`, `"` written as &amp; &lt; &gt; &quot;.
/// (The official encoder writes names raw; for every name without those four characters the
/// output is identical, and escaping keeps names with them parseable.)
void append_dsml_attr_escaped(std::string& out, std::string_view value);

/// Inverse of append_dsml_attr_escaped; also decodes &apos;. Any other `&` is kept literally.
std::string dsml_attr_unescape(std::string_view value);

/// Appends a string="true" parameter value. Raw text, as the official encoder writes it, except
/// for the one sequence that would end the value early: `</｜DSML｜parameter>` is written
/// `&lt;/｜DSML｜parameter>`. To keep that reversible, an existing `&` + ("amp;")*k + "lt;" +
/// `/｜DSML｜parameter>` gains one "amp;". Text without a `/｜DSML｜parameter>` is copied as is.
void append_dsml_string_value(std::string& out, std::string_view value);

/// Inverse of append_dsml_string_value for a block of `spelling` (the tail is
/// `/PREFIXparameter>`): `&lt;` + tail -> `<` + tail, `&` + ("amp;")*(k+1) + "lt;" + tail ->
/// `&` + ("amp;")*k + "lt;" + tail. Other entities are kept literally (they are model text).
std::string dsml_string_value_unescape(std::string_view value, DsmlSpelling spelling);

/// Appends a string="false" parameter value: `json_text` with every `</｜DSML｜parameter>`
/// written `\u003c/｜DSML｜parameter>` (it can only occur inside a JSON string, where the
/// escape means the same character).
void append_dsml_json_value(std::string& out, std::string_view json_text);

/// Result of matching the escaped-closing-tag pattern `&` ("amp;")*k "lt;" tail at a position.
struct EscapeMatch {
  enum Status { none, partial, full } status = none;
  size_t length = 0;  // bytes matched when full
  size_t amps = 0;    // k, the number of "amp;" repetitions, when full
};

/// Matches `&` ("amp;")* "lt;" `tail` at the start of `text`. `partial` means `text` ends while
/// still matching (more bytes could complete it).
EscapeMatch match_escaped_close(std::string_view text, std::string_view tail);

}  // namespace ds4::chat
