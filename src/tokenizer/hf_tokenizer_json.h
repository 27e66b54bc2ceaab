// Converts a Hugging Face tokenizer.json (DeepSeek V3 format) into ds4's GGUF-style Vocab.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tokenizer/v4_added_tokens.h"
#include "tokenizer/vocab.h"

namespace ds4::tok {

/// How load_hf_tokenizer_json builds the vocabulary.
struct HfLoadOptions {
  /// Number of token ids to produce (the V4 embedding size by default); ids not defined by the
  /// file are filled (see load_hf_tokenizer_json).
  int32_t vocab_size = kDeepSeekV4VocabSize;
  /// Also place the tokens DeepSeek V4 adds (deepseek_v4_added_tokens) at their ids, typed kControl
  /// (a file that already has one at its id keeps the file's type).
  /// Off, the vocabulary tokenizes exactly like the file (what the npm reference does).
  bool add_v4_tokens = true;
};

/// Reads a tokenizer.json and returns a `vocab_size`-entry Vocab in GGUF form:
/// - tokens: `model.vocab` (already byte-encoded) at their ids, then `added_tokens` at theirs (typed
///   kControl when `"special": true`, else kUserDefined), then the V4 tokens (option), all other
///   ids >= 128000 as `<｜place▁holder▁no▁N｜>` with N = id - 128000 (continuing DeepSeek's own
///   placeholder numbering) typed kUnused; model.vocab entries are kNormal;
/// - merges: `model.merges`, as "left right" strings (the [left, right] array form is converted).
/// Only what ds4's Tokenizer implements is accepted: model type BPE without byte fallback, dropout,
/// subword prefixes/suffixes or ignore_merges; an empty normalizer; and a pre_tokenizer that is
/// exactly kSplitPatterns as three Isolated Splits followed by ByteLevel without regex.
/// Throws ds4::Error (naming `path` and what is wrong) when the file cannot be read or parsed, when
/// any of that does not hold, when an id is negative or >= vocab_size, when two different strings
/// claim one id, when an id < 128000 is left without a token, or when a V4 token's id is taken by a
/// different string.
Vocab load_hf_tokenizer_json(const std::string& path, const HfLoadOptions& options = {});

/// The same conversion from the JSON text itself; `source` names it in error messages.
Vocab vocab_from_hf_tokenizer_json(std::string_view json_text, const HfLoadOptions& options = {},
                                   std::string_view source = "tokenizer.json");

}  // namespace ds4::tok
