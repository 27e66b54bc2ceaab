// The special token strings ds4 looks up by exact string (spec §6.1). Ids always come from the
// vocabulary, never from constants here.
#pragma once

#include <array>
#include <string_view>

namespace ds4::tok {

// The bars are U+FF5C FULLWIDTH VERTICAL LINE, the word separators U+2581 LOWER ONE EIGHTH BLOCK.
inline constexpr std::string_view kBosToken = "<\uFF5Cbegin\u2581of\u2581sentence\uFF5C>";
inline constexpr std::string_view kEosToken = "<\uFF5Cend\u2581of\u2581sentence\uFF5C>";
inline constexpr std::string_view kUserToken = "<\uFF5CUser\uFF5C>";
inline constexpr std::string_view kAssistantToken = "<\uFF5CAssistant\uFF5C>";
inline constexpr std::string_view kThinkBeginToken = "<think>";
inline constexpr std::string_view kThinkEndToken = "</think>";
inline constexpr std::string_view kDsmlToken = "\uFF5C" "DSML\uFF5C";

static_assert(kBosToken.size() == 29 && kDsmlToken.size() == 10, "source must be compiled as UTF-8");

/// The seven strings of spec §6.1, in the order of SpecialTokens' fields.
inline constexpr std::array<std::string_view, 7> kSpecialTokenStrings = {
    kBosToken, kEosToken, kUserToken, kAssistantToken, kThinkBeginToken, kThinkEndToken, kDsmlToken};

/// Ids of the seven special tokens of spec §6.1 in one vocabulary.
struct SpecialTokens {
  int32_t bos;          ///< <｜begin▁of▁sentence｜>
  int32_t eos;          ///< <｜end▁of▁sentence｜>
  int32_t user;         ///< <｜User｜>
  int32_t assistant;    ///< <｜Assistant｜>
  int32_t think_begin;  ///< <think>
  int32_t think_end;    ///< </think>
  int32_t dsml;         ///< ｜DSML｜
};

}  // namespace ds4::tok
