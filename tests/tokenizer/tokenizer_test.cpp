#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "toy_vocab.h"

namespace ds4::tok {
namespace {

using namespace ds4::tok::testing;
using Ids = std::vector<int32_t>;

const Tokenizer& toy() {
  static const Tokenizer t(toy_vocab());
  return t;
}

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Tokenizer, EncodesPlainTextByPiecesThenMerges) {
  EXPECT_EQ(toy().encode_plain("hello world"), (Ids{kHello, kSpaceWor, 'l', 'd'}));
  EXPECT_EQ(toy().encode_plain("hello hello"), (Ids{kHello, ' ', kHello}));  // no merge joins Ġ and hello
  EXPECT_EQ(toy().encode_plain(""), (Ids{}));
}

TEST(Tokenizer, PlainEncodingIgnoresSpecialStrings) {
  const Ids ids = toy().encode_plain("<think>");
  EXPECT_EQ(ids, (Ids{'<', 't', 'h', 'i', 'n', 'k', '>'}));
}

TEST(Tokenizer, SpecialsAreSplitOutLeftmostLongest) {
  const std::string text = std::string(kBosToken) + "hello" + std::string(kUserToken) + "abc" +
                           std::string(kThinkBeginToken) + "</think>x" + std::string(kDsmlToken);
  EXPECT_EQ(toy().encode_with_specials(text), (Ids{kBos, kHello, kUser, 'a', kBC, kThinkBegin, kThinkEnd, 'x', kDsml}));
  EXPECT_EQ(toy().encode_with_specials("x<a>bc"), (Ids{'x', kAngleAB, 'c'}));  // "<a>b" beats "<a>"
  EXPECT_EQ(toy().encode_with_specials("<a>c<a>"), (Ids{kAngleA, 'c', kAngleA}));
  EXPECT_EQ(toy().encode_with_specials("<a"), (Ids{'<', 'a'}));
  EXPECT_EQ(toy().encode_with_specials("<think><think>"), (Ids{kThinkBegin, kThinkBegin}));
}

TEST(Tokenizer, UnusedTokensAreNeverMatchedInText) {
  const std::string& placeholder = toy().token_string(kUnusedPlaceholder);
  const Ids ids = toy().encode_with_specials(placeholder);
  EXPECT_GT(ids.size(), 1u);
  EXPECT_EQ(toy().decode(ids), placeholder);
}

TEST(Tokenizer, DecodesByteTokensThroughTheInverseMapAndSpecialsVerbatim) {
  EXPECT_EQ(toy().decode(Ids{kHello, kSpaceWor, 'l', 'd'}), "hello world");
  EXPECT_EQ(toy().token_piece(' '), " ");             // token string "Ġ"
  EXPECT_EQ(toy().token_string(' '), "\xC4\xA0");
  EXPECT_EQ(toy().token_piece(0xE4), "\xE4");         // a lone byte, not UTF-8 by itself
  EXPECT_EQ(toy().token_piece(kUser), kUserToken);
  EXPECT_EQ(toy().decode(Ids{kBos, 'h', kThinkEnd}), std::string(kBosToken) + "h</think>");
  EXPECT_EQ(toy().token_piece(kUnusedPlaceholder), toy().token_string(kUnusedPlaceholder));
  EXPECT_TRUE(toy().is_special(kUser));
  EXPECT_FALSE(toy().is_special(kUnusedPlaceholder));
  EXPECT_EQ(toy().token_type(kBos), TokenType::kControl);
}

TEST(Tokenizer, NormalTokenOutsideTheByteAlphabetDecodesVerbatim) {
  Vocab v = toy_vocab();
  v.tokens.push_back("a b");  // raw space: not byte-encoded, so not decodable; HF emits it as is
  v.token_types.push_back(static_cast<int32_t>(TokenType::kNormal));
  const Tokenizer t(std::move(v));
  EXPECT_EQ(t.token_piece(t.n_vocab() - 1), "a b");
}

TEST(Tokenizer, SpecialTokenIdsAreLookedUpByString) {
  const SpecialTokens s = toy().special_tokens();
  EXPECT_EQ(s.bos, kBos);
  EXPECT_EQ(s.eos, kEos);
  EXPECT_EQ(s.user, kUser);
  EXPECT_EQ(s.assistant, kAssistant);
  EXPECT_EQ(s.think_begin, kThinkBegin);
  EXPECT_EQ(s.think_end, kThinkEnd);
  EXPECT_EQ(s.dsml, kDsml);
  EXPECT_EQ(toy().find_token("hello"), kHello);
  EXPECT_EQ(toy().find_token("nope"), std::nullopt);
}

TEST(Tokenizer, MissingSpecialTokensAreAllNamed) {
  Vocab v = toy_vocab();
  v.tokens[kThinkEnd] = "</thought>";
  v.tokens[kDsml] = "DSML";
  const Tokenizer t(std::move(v));
  const std::string msg = error_of([&] { t.special_tokens(); });
  EXPECT_NE(msg.find("</think>"), std::string::npos) << msg;
  EXPECT_NE(msg.find(kDsmlToken), std::string::npos) << msg;
  EXPECT_EQ(msg.find(kBosToken), std::string::npos) << msg;
}

TEST(Tokenizer, WithoutTokenTypesTheSpecStringsAreTheSpecials) {
  const Tokenizer t(toy_vocab(/*with_types=*/false));
  EXPECT_TRUE(t.is_special(kUser));
  EXPECT_TRUE(t.is_special(kDsml));
  EXPECT_FALSE(t.is_special(kAngleA));  // not one of the seven spec strings
  EXPECT_EQ(t.encode_with_specials(std::string(kUserToken) + "<a>"), (Ids{kUser, '<', 'a', '>'}));
}

TEST(Tokenizer, BadIdsAreErrors) {
  const int32_t n = toy().n_vocab();
  EXPECT_NE(error_of([&] { toy().decode(Ids{'a', n}); }).find("position 1"), std::string::npos);
  EXPECT_THROW(toy().decode(Ids{-1}), Error);
  EXPECT_THROW(toy().token_piece(n), Error);
  EXPECT_THROW(toy().token_string(-5), Error);
  EXPECT_THROW(toy().token_type(n), Error);
  EXPECT_THROW(toy().is_special(n), Error);
}

TEST(Tokenizer, BadVocabulariesAreErrors) {
  EXPECT_THROW(Tokenizer(Vocab{}), Error);
  Vocab short_types = toy_vocab();
  short_types.token_types.pop_back();
  EXPECT_NE(error_of([&] { Tokenizer t(std::move(short_types)); }).find("token types"), std::string::npos);
  Vocab bad_type = toy_vocab();
  bad_type.token_types[5] = 9;
  EXPECT_NE(error_of([&] { Tokenizer t(std::move(bad_type)); }).find("token 5"), std::string::npos);
}

TEST(Tokenizer, InvalidUtf8BytesEncodeAsTheirByteTokens) {
  EXPECT_EQ(toy().encode_plain("\xFF"), (Ids{0xFF}));
  EXPECT_EQ(toy().encode_plain("he\xE1\x80llo"), (Ids{kFirstMerge, 0xE1, 0x80, kFirstMerge + 1, 'o'}));
}

TEST(Tokenizer, RandomBytesRoundTripExactly) {
  std::mt19937 rng(99);
  for (int iter = 0; iter < 500; ++iter) {
    std::string s(rng() % 80, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 4 == 0 ? "<a>hel o\n"[rng() % 9] : rng() & 0xFF);
    ASSERT_EQ(toy().decode(toy().encode_plain(s)), s);
    ASSERT_EQ(toy().decode(toy().encode_with_specials(s)), s);
  }
}

TEST(Tokenizer, ConcurrentEncodingGivesTheSameIds) {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "hello world " + std::to_string(i) + " abc aaaa\n";
  const Ids expect = toy().encode_plain(text);
  std::vector<Ids> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got) threads.emplace_back([&] { g = toy().encode_plain(text); });
  for (auto& t : threads) t.join();
  for (const Ids& g : got) EXPECT_EQ(g, expect);
}

TEST(Tokenizer, SharedCorpusRoundTrips) {
  const std::filesystem::path dir = std::filesystem::path(DS4_SHARED_DIR) / "testdata" / "text";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is missing";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".txt") continue;
    std::ifstream f(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    EXPECT_EQ(toy().decode(toy().encode_plain(text)), text) << entry.path();
  }
}

}  // namespace
}  // namespace ds4::tok
