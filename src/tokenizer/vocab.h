// The vocabulary a byte-level BPE tokenizer is built from, in the form GGUF stores it (spec §6.1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds4::tok {

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp numbering).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      ///< special token (BOS, EOS, placeholders): matched in text by encode_with_specials
  kUserDefined = 4,  ///< added token (`<｜User｜>`, `<think>`): matched in text by encode_with_specials
  kUnused = 5,       ///< id that exists only to fill the embedding table; never produced by encode
  kByte = 6,
};

/// A byte-level BPE vocabulary (spec §6.1), as read from GGUF metadata or converted from a Hugging
/// Face tokenizer.json (see hf_tokenizer_json.h).
struct Vocab {
  /// `tokenizer.ggml.tokens`: token id = index; each string is in GPT-2 byte-encoded form (spec
  /// §6.2), except added/special tokens, which are stored verbatim (`<｜User｜>`).
  std::vector<std::string> tokens;
  /// `tokenizer.ggml.merges`: `"left right"` (one ASCII space), byte-encoded; merge rank = index.
  std::vector<std::string> merges;
  /// `tokenizer.ggml.token_type` (TokenType values): empty, or exactly one per token.
  std::vector<int32_t> token_types;
};

}  // namespace ds4::tok
