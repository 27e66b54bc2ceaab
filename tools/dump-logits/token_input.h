// Token sources of the dump tool: an explicit id list ("1,2,3" or whitespace separated, also
// from a file) or the first tokens of a text file tokenized with the model's vocabulary.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ds4::dump {

/// Parses token ids separated by commas and/or whitespace ("1,2, 3\n4"). `what` names the
/// source in errors. Throws ds4::Error when the list is empty, an entry is not a decimal
/// integer, is negative or does not fit int32, or two commas have nothing between them.
std::vector<int32_t> parse_token_list(std::string_view text, std::string_view what);

/// Reads a file's bytes. Throws ds4::Error naming the file when it cannot be read.
std::string read_text_file(const std::string& path);

/// Tokenizes `text` as plain text (tok::Tokenizer::encode_plain, no specials, no BOS) and
/// keeps the first `max_tokens` ids (0 = all). Throws ds4::Error when no token results.
std::vector<int32_t> tokens_from_text(const tok::Tokenizer& tokenizer, std::string_view text,
                                      int64_t max_tokens);

}  // namespace ds4::dump
