#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <limits>

#include "common/error.h"
#include "tokenizer/byte_map.h"
#include "tokenizer/piece_cache.h"

namespace ds4::tok {
namespace {

constexpr size_t kCacheMaxPiece = 48;  // longer pieces are rare and not worth remembering

std::vector<std::string> checked_tokens(std::vector<std::string>&& tokens) {
  if (tokens.empty()) fail("tokenizer: the vocabulary is empty");
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    fail("tokenizer: the vocabulary has {} tokens, more than token ids can address", tokens.size());
  return std::move(tokens);
}

}  // namespace

// Per-call state: pieces of the current span and a piece -> ids cache (keys view the input text).
struct Tokenizer::Scratch {
  std::vector<std::string_view> pieces;
  PieceCache cache;
};

Tokenizer::Tokenizer(Vocab vocab)
    : tokens_(checked_tokens(std::move(vocab.tokens))), bpe_(tokens_, vocab.merges) {
  const size_t n = tokens_.size();
  if (!vocab.token_types.empty() && vocab.token_types.size() != n)
    fail("tokenizer: {} token types for {} tokens", vocab.token_types.size(), n);

  index_.reserve(n * 2);
  for (size_t id = 0; id < n; ++id) index_.emplace(tokens_[id], static_cast<int32_t>(id));

  types_.assign(n, TokenType::kNormal);
  if (!vocab.token_types.empty()) {
    for (size_t id = 0; id < n; ++id) {
      const int32_t t = vocab.token_types[id];
      if (t < 0 || t > static_cast<int32_t>(TokenType::kByte))
        fail("tokenizer: token {} ('{}') has type {}, expected 0..6", id, tokens_[id], t);
      types_[id] = static_cast<TokenType>(t);
    }
  } else {
    for (std::string_view s : kSpecialTokenStrings)
      if (auto id = find_token(s)) types_[*id] = TokenType::kControl;
  }

  special_.assign(n, 0);
  pieces_.resize(n);
  for (size_t id = 0; id < n; ++id) {
    const TokenType t = types_[id];
    special_[id] = (t == TokenType::kControl || t == TokenType::kUserDefined) && !tokens_[id].empty();
    if (special_[id] || t == TokenType::kUnused) {
      pieces_[id] = tokens_[id];
    } else {
      std::optional<std::string> bytes = byte_decode(tokens_[id]);
      pieces_[id] = bytes ? std::move(*bytes) : tokens_[id];
    }
    if (special_[id]) {
      const auto first = static_cast<uint8_t>(tokens_[id][0]);
      special_first_[first] = true;
      // Keep only the lowest id of a repeated string (find_token's answer).
      if (index_.at(tokens_[id]) == static_cast<int32_t>(id))
        special_by_first_[first].emplace_back(tokens_[id], static_cast<int32_t>(id));
    }
  }
  for (auto& list : special_by_first_)
    std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

Tokenizer::~Tokenizer() = default;

void Tokenizer::check_id(int32_t id, const char* what) const {
  if (id < 0 || id >= n_vocab()) fail("tokenizer: {}: token id {} is outside [0, {})", what, id, n_vocab());
}

void Tokenizer::encode_span(std::string_view text, std::vector<int32_t>& out, Scratch& sc) const {
  sc.pieces.clear();
  pre_.split(text, sc.pieces);
  sc.cache.reserve(sc.pieces.size() / 4);  // prose: roughly one distinct piece in ten
  for (std::string_view piece : sc.pieces) {
    if (piece.size() == 1) {
      out.push_back(bpe_.byte_token(static_cast<uint8_t>(piece[0])));
    } else if (piece.size() <= kCacheMaxPiece) {
      const int32_t* ids = nullptr;
      uint32_t count = 0;
      if (sc.cache.find(piece, ids, count)) {
        out.insert(out.end(), ids, ids + count);
        continue;
      }
      const size_t before = out.size();
      bpe_.encode(piece, out);
      sc.cache.insert(piece, out.data() + before, static_cast<uint32_t>(out.size() - before));
    } else {
      bpe_.encode(piece, out);
    }
  }
}

std::vector<int32_t> Tokenizer::encode_plain(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 16);
  Scratch sc;
  encode_span(text, out, sc);
  return out;
}

bool Tokenizer::find_special(std::string_view text, size_t from, size_t& at, size_t& len, int32_t& id) const {
  for (size_t i = from; i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    if (!special_first_[b]) continue;
    for (const auto& [s, sid] : special_by_first_[b]) {
      if (text.size() - i >= s.size() && text.compare(i, s.size(), s) == 0) {
        at = i, len = s.size(), id = sid;
        return true;
      }
    }
  }
  return false;
}

std::vector<int32_t> Tokenizer::encode_with_specials(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 16);
  Scratch sc;
  size_t pos = 0, at = 0, len = 0;
  int32_t id = 0;
  while (pos < text.size() && find_special(text, pos, at, len, id)) {
    if (at > pos) encode_span(text.substr(pos, at - pos), out, sc);
    out.push_back(id);
    pos = at + len;
  }
  if (pos < text.size()) encode_span(text.substr(pos), out, sc);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  size_t total = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n_vocab())
      fail("tokenizer: decode: token id {} at position {} is outside [0, {})", ids[i], i, n_vocab());
    total += pieces_[ids[i]].size();
  }
  std::string out;
  out.reserve(total);
  for (int32_t id : ids) out += pieces_[id];
  return out;
}

const std::string& Tokenizer::token_piece(int32_t id) const {
  check_id(id, "token_piece");
  return pieces_[id];
}

const std::string& Tokenizer::token_string(int32_t id) const {
  check_id(id, "token_string");
  return tokens_[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  check_id(id, "token_type");
  return types_[id];
}

bool Tokenizer::is_special(int32_t id) const {
  check_id(id, "is_special");
  return special_[id] != 0;
}

std::optional<int32_t> Tokenizer::find_token(std::string_view token_string) const {
  auto it = index_.find(token_string);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

SpecialTokens Tokenizer::special_tokens() const {
  std::array<int32_t, 7> ids{};
  std::string missing;
  for (size_t i = 0; i < kSpecialTokenStrings.size(); ++i) {
    if (auto id = find_token(kSpecialTokenStrings[i])) {
      ids[i] = *id;
    } else {
      missing += missing.empty() ? "" : ", ";
      missing += kSpecialTokenStrings[i];
    }
  }
  if (!missing.empty()) fail("tokenizer: the vocabulary lacks special token(s) {} (spec §6.1)", missing);
  return SpecialTokens{ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6]};
}

}  // namespace ds4::tok
