// Byte-level BPE tokenizer for DeepSeek V4 (spec §6.1-6.5): exact pre-tokenizer, id-keyed merges,
// special-token splitting, decoding to bytes.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/vocab.h"

namespace ds4::tok {

/// A byte-level BPE tokenizer built from a GGUF-style Vocab. Immutable after construction; all
/// methods are const and thread-safe.
///
/// Which tokens are "special" (split out of text by encode_with_specials, decoded verbatim): those
/// typed kControl or kUserDefined in Vocab::token_types. Without token types, exactly the seven
/// strings of spec §6.1 that the vocabulary holds.
class Tokenizer {
 public:
  /// Builds the tokenizer. Throws ds4::Error (with the offending index) when the vocabulary is
  /// empty or larger than INT32_MAX, token_types has the wrong length or a value outside 0..6, a
  /// byte has no token, or a merge is malformed / refers to strings that are not tokens.
  explicit Tokenizer(Vocab vocab);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  /// Number of token ids (vocabulary size).
  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }

  /// Tokenizes `text` (any bytes) as plain text: no special token is recognised, so "<｜User｜>"
  /// becomes ordinary BPE tokens. Pre-tokenizer (spec §6.4, exact, see PreTokenizer) then BPE
  /// (spec §6.3) per piece. No BOS is added. Invalid UTF-8 bytes become their byte tokens, so
  /// decode(encode_plain(x)) == x for every byte string. Never throws on any input.
  std::vector<int32_t> encode_plain(std::string_view text) const;

  /// Like encode_plain, but every occurrence of a special token string (see class comment) is
  /// emitted as its id and the spans between are BPE-tokenized (spec §6.5). Matching is
  /// leftmost-longest, as in Hugging Face tokenizers: at the first position where any special
  /// string starts, the longest one starting there wins. This is what the official tokenizer's
  /// encode(text, add_special_tokens=False) does. Never throws on any input.
  std::vector<int32_t> encode_with_specials(std::string_view text) const;

  /// Concatenated bytes of the tokens (token_piece of each id). Not necessarily valid UTF-8 (a
  /// character may be split across the sequence boundary); use utf8_sanitize or StreamDecoder for
  /// display. Throws ds4::Error naming the position when an id is outside [0, n_vocab()).
  std::string decode(std::span<const int32_t> ids) const;

  /// The bytes one token decodes to: special tokens (class comment) and kUnused tokens verbatim;
  /// other tokens through the inverse GPT-2 byte map (spec §6.2) when every character of the token
  /// string is a byte code point, else verbatim (the Hugging Face ByteLevel decoder's rule).
  /// Throws ds4::Error when `id` is outside [0, n_vocab()).
  const std::string& token_piece(int32_t id) const;

  /// The vocabulary string of `id` as stored (byte-encoded). Throws ds4::Error when out of range.
  const std::string& token_string(int32_t id) const;

  /// The type of `id` (kNormal when the vocabulary has no types, except the seven spec strings,
  /// which are kControl). Throws ds4::Error when out of range.
  TokenType token_type(int32_t id) const;

  /// True when `id` is split out by encode_with_specials and decoded verbatim. Throws when out of range.
  bool is_special(int32_t id) const;

  /// Id of the token whose vocabulary string is exactly `token_string` (lowest id on duplicates).
  std::optional<int32_t> find_token(std::string_view token_string) const;

  /// Ids of spec §6.1's seven special tokens. Throws ds4::Error listing every missing string.
  SpecialTokens special_tokens() const;

  /// The pre-tokenizer and BPE model this tokenizer uses (for tests and benchmarks).
  const PreTokenizer& pre_tokenizer() const { return pre_; }
  const BpeModel& bpe() const { return bpe_; }

 private:
  struct Scratch;
  void check_id(int32_t id, const char* what) const;
  void encode_span(std::string_view text, std::vector<int32_t>& out, Scratch& sc) const;
  // Earliest (then longest) special token occurrence at or after `from`; false when none.
  bool find_special(std::string_view text, size_t from, size_t& at, size_t& len, int32_t& id) const;

  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::vector<std::string> pieces_;  // decoded bytes per id
  std::vector<uint8_t> special_;     // 1 when the id is split out / decoded verbatim
  std::unordered_map<std::string_view, int32_t> index_;  // views into tokens_
  PreTokenizer pre_;
  BpeModel bpe_;
  // Special strings grouped by first byte, longest first.
  std::array<bool, 256> special_first_{};
  std::array<std::vector<std::pair<std::string_view, int32_t>>, 256> special_by_first_;
};

}  // namespace ds4::tok
