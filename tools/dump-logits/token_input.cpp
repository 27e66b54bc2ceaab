#include "token_input.h"

#include <charconv>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace ds4::dump {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

std::vector<int32_t> parse_token_list(std::string_view text, std::string_view what) {
  std::vector<int32_t> ids;
  size_t i = 0;
  bool need_value = false;  // after a comma a value must follow
  while (i < text.size()) {
    if (is_space(text[i])) {
      ++i;
      continue;
    }
    if (text[i] == ',') {
      if (ids.empty() || need_value) fail("{}: empty entry at byte {}", what, i);
      need_value = true;
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && !is_space(text[j]) && text[j] != ',') ++j;
    const std::string_view item = text.substr(i, j - i);
    int32_t v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec == std::errc::result_out_of_range)
      fail("{}: token id '{}' at byte {} does not fit 32 bits", what, item, i);
    if (ec != std::errc() || end != item.data() + item.size())
      fail("{}: '{}' at byte {} is not a token id", what, item, i);
    if (v < 0) fail("{}: negative token id {} at byte {}", what, v, i);
    ids.push_back(v);
    need_value = false;
    i = j;
  }
  if (need_value) fail("{}: trailing comma", what);
  if (ids.empty()) fail("{}: no token ids", what);
  return ids;
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open", path);
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail("{}: read failed", path);
  return ss.str();
}

std::vector<int32_t> tokens_from_text(const tok::Tokenizer& tokenizer, std::string_view text,
                                      int64_t max_tokens) {
  if (max_tokens < 0) fail("max tokens must be >= 0, got {}", max_tokens);
  std::vector<int32_t> ids = tokenizer.encode_plain(text);
  if (ids.empty()) fail("the text gives no tokens");
  if (max_tokens > 0 && static_cast<int64_t>(ids.size()) > max_tokens)
    ids.resize(static_cast<size_t>(max_tokens));
  return ids;
}

}  // namespace ds4::dump
