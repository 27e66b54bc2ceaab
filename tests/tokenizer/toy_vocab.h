// A small hand-made byte-level BPE vocabulary whose encodings can be worked out by hand.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/byte_map.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/vocab.h"

namespace ds4::tok::testing {

// Ids 0..255: the byte tokens in byte order (id == byte value). Then one token per merge, in merge
// order (kFirstMerge + rank), then the special tokens below.
inline constexpr int kFirstMerge = 256;
inline const std::vector<std::pair<std::string, std::string>> kToyMerges = {
    {"h", "e"},       // 256 he
    {"l", "l"},       // 257 ll
    {"he", "ll"},     // 258 hell
    {"hell", "o"},    // 259 hello
    {"\xC4\xA0", "w"},  // 260 Ġw  (Ġ = U+0120 = byte 0x20)
    {"o", "r"},       // 261 or
    {"\xC4\xA0w", "or"},  // 262 Ġwor
    {"a", "a"},       // 263 aa
    {"b", "c"},       // 264 bc
    {"a", "b"},       // 265 ab
    {"aa", "aa"},     // 266 aaaa
};
inline constexpr int kHello = 259, kSpaceWor = 262, kAA = 263, kBC = 264, kAB = 265, kAAAA = 266;

// Special tokens (id, string, type) after the merges.
inline constexpr int kBos = 267, kEos = 268, kUser = 269, kAssistant = 270, kThinkBegin = 271, kThinkEnd = 272,
                     kDsml = 273, kAngleA = 274, kAngleAB = 275, kUnusedPlaceholder = 276;

inline Vocab toy_vocab(bool with_types = true) {
  Vocab v;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_encode(std::string(1, static_cast<char>(b))));
  for (const auto& [l, r] : kToyMerges) {
    v.merges.push_back(l + " " + r);
    v.tokens.push_back(l + r);
  }
  const auto normal = static_cast<int32_t>(TokenType::kNormal), control = static_cast<int32_t>(TokenType::kControl),
             user = static_cast<int32_t>(TokenType::kUserDefined), unused = static_cast<int32_t>(TokenType::kUnused);
  v.token_types.assign(v.tokens.size(), normal);
  auto add = [&](std::string_view s, int32_t type) {
    v.tokens.emplace_back(s);
    v.token_types.push_back(type);
  };
  add(kBosToken, control);
  add(kEosToken, control);
  add(kUserToken, user);
  add(kAssistantToken, user);
  add(kThinkBeginToken, user);
  add(kThinkEndToken, user);
  add(kDsmlToken, control);
  add("<a>", control);
  add("<a>b", control);
  add("<\uFF5Cplace\u2581holder\u2581no\u2581900\uFF5C>", unused);
  if (!with_types) v.token_types.clear();
  return v;
}

}  // namespace ds4::tok::testing
