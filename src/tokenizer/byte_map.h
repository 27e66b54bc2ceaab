// GPT-2 byte <-> code point map used by byte-level BPE (spec §6.2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ds4::tok {

/// Code point that byte `b` is written as in token strings: bytes 33-126, 161-172 and 174-255 map to
/// themselves; the other 68 bytes map, in increasing byte order, to U+0100, U+0101, ... (spec §6.2).
uint32_t byte_to_codepoint(uint8_t b);

/// Inverse of byte_to_codepoint: the byte that code point `cp` stands for, or -1 when `cp` is not
/// one of the 256 byte code points.
int codepoint_to_byte(uint32_t cp);

/// Byte-encodes raw bytes: each byte becomes the UTF-8 of byte_to_codepoint(byte). Never throws.
std::string byte_encode(std::string_view bytes);

/// Decodes a byte-encoded token string back to raw bytes, or std::nullopt when the string is not
/// valid UTF-8 or holds a code point outside the 256 byte code points (an added token such as
/// `<｜User｜>`). Never throws.
std::optional<std::string> byte_decode(std::string_view encoded);

}  // namespace ds4::tok
