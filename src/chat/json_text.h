// JSON text forms used by the chat encoding: Python json.dumps formatting (what DeepSeek's
// official encoder writes into prompts) and minification of model-written JSON (what the output
// parser returns as tool-call arguments).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace ds4::chat {

/// Appends `value` formatted exactly as Python's json.dumps(value, ensure_ascii=False) does with
/// default arguments: separators ", " and ": ", object keys in stored order (use ordered_json to
/// keep the client's order), strings escaped by append_json_string_body, integers in decimal,
/// floats as Python repr (see python_float_repr), NaN/Infinity/-Infinity for non-finite floats.
/// Throws ds4::Error for a string that is not valid UTF-8 or a binary value.
void append_python_json(std::string& out, const nlohmann::ordered_json& value);

/// python_json_dumps(v) == the text append_python_json appends.
std::string python_json_dumps(const nlohmann::ordered_json& value);

/// Python repr() of a finite double: the shortest digits that round-trip; fixed notation when
/// the decimal exponent e (d.ddd x 10^e) satisfies -4 <= e < 16 (always with a fractional part,
/// "1.0"), otherwise "d.ddde+XX" with a sign and at least two exponent digits ("1e-05", "1e+16").
std::string python_float_repr(double value);

/// If `text` (surrounding whitespace allowed) is one valid JSON value (RFC 8259, as
/// nlohmann::json::accept decides), returns it with all insignificant whitespace removed; numbers,
/// strings and escapes are kept byte for byte (so big integers and exact decimals survive).
/// Returns nullopt for invalid JSON.
std::optional<std::string> minify_json(std::string_view text);

}  // namespace ds4::chat
