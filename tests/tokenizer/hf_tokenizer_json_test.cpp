#include "tokenizer/hf_tokenizer_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "toy_vocab.h"

namespace ds4::tok {
namespace {

using nlohmann::json;
using namespace ds4::tok::testing;

json pre_tokenizer_json() {
  json seq = json::array();
  for (std::string_view p : kSplitPatterns)
    seq.push_back({{"type", "Split"}, {"pattern", {{"Regex", p}}}, {"behavior", "Isolated"}, {"invert", false}});
  seq.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}});
  return {{"type", "Sequence"}, {"pretokenizers", seq}};
}

// A tokenizer.json shaped like DeepSeek's: ids 0-2 BOS/EOS/pad (in model.vocab and added_tokens),
// then the toy byte tokens and merge results, then `filler` plain tokens.
json deepseek_like(int filler) {
  json vocab = json::object();
  const std::string specials[3] = {std::string(kBosToken), std::string(kEosToken), "<\uFF5C\u2581pad\u2581\uFF5C>"};
  int id = 0;
  for (const std::string& s : specials) vocab[s] = id++;
  const Vocab toy = toy_vocab();
  for (int i = 0; i < kFirstMerge + static_cast<int>(kToyMerges.size()); ++i) vocab[toy.tokens[i]] = id++;
  for (int i = 0; i < filler; ++i) {
    std::string key = "w";  // (not "w" + to_string: GCC 12 -O3 raises a false -Wrestrict on that)
    key += std::to_string(i);
    vocab[key] = id++;
  }
  json added = json::array();
  for (int i = 0; i < 3; ++i) added.push_back({{"id", i}, {"content", specials[i]}, {"special", true}});
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array()}}},
          {"pre_tokenizer", pre_tokenizer_json()},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"byte_fallback", false}, {"vocab", vocab}, {"merges", toy.merges}}}};
}

int base_size() { return 3 + kFirstMerge + static_cast<int>(kToyMerges.size()); }

std::string error_of(const json& j, HfLoadOptions o = {}) {
  try {
    vocab_from_hf_tokenizer_json(j.dump(), o, "test.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(HfTokenizerJson, ConvertsVocabAddedTokensAndMerges) {
  json j = deepseek_like(0);
  j["added_tokens"].push_back({{"id", base_size()}, {"content", std::string(kUserToken)}, {"special", false}});
  j["model"]["merges"][1] = json::array({"l", "l"});  // the newer [left, right] form
  const Vocab v = vocab_from_hf_tokenizer_json(j.dump(), {.vocab_size = base_size() + 1, .add_v4_tokens = false});
  ASSERT_EQ(v.tokens.size(), static_cast<size_t>(base_size() + 1));
  EXPECT_EQ(v.tokens[0], kBosToken);
  EXPECT_EQ(v.token_types[0], static_cast<int32_t>(TokenType::kControl));
  EXPECT_EQ(v.tokens[3 + 'a'], "a");
  EXPECT_EQ(v.token_types[3 + 'a'], static_cast<int32_t>(TokenType::kNormal));
  EXPECT_EQ(v.tokens[base_size()], kUserToken);
  EXPECT_EQ(v.token_types[base_size()], static_cast<int32_t>(TokenType::kUserDefined));
  ASSERT_EQ(v.merges.size(), kToyMerges.size());
  EXPECT_EQ(v.merges[0], "h e");
  EXPECT_EQ(v.merges[1], "l l");
}

TEST(HfTokenizerJson, FillsTheV4VocabularyAndItsAddedTokens) {
  json j = deepseek_like(128000 - base_size());
  j["added_tokens"].push_back({{"id", 128000}, {"content", "<\uFF5Cplace\u2581holder\u2581no\u25810\uFF5C>"}, {"special", true}});
  j["added_tokens"].push_back({{"id", 128803}, {"content", std::string(kUserToken)}, {"special", false}});
  j["added_tokens"].push_back({{"id", 128804}, {"content", std::string(kAssistantToken)}, {"special", false}});
  Vocab v = vocab_from_hf_tokenizer_json(j.dump());
  ASSERT_EQ(v.tokens.size(), 129280u);
  EXPECT_EQ(v.tokens[128001], "<\uFF5Cplace\u2581holder\u2581no\u25811\uFF5C>");
  EXPECT_EQ(v.token_types[128001], static_cast<int32_t>(TokenType::kUnused));
  EXPECT_EQ(v.tokens[129261], "<\uFF5Cplace\u2581holder\u2581no\u25811261\uFF5C>");
  EXPECT_EQ(v.tokens[128821], "<think>");
  EXPECT_EQ(v.token_types[128821], static_cast<int32_t>(TokenType::kControl));
  EXPECT_EQ(v.tokens[129279], "<\uFF5Cimage\uFF5C>");
  const Tokenizer t(std::move(v));
  const SpecialTokens s = t.special_tokens();
  EXPECT_EQ(s.bos, 0);
  EXPECT_EQ(s.eos, 1);
  EXPECT_EQ(s.user, 128803);
  EXPECT_EQ(s.assistant, 128804);
  EXPECT_EQ(s.think_begin, 128821);
  EXPECT_EQ(s.think_end, 128822);
  EXPECT_EQ(s.dsml, 128825);
  EXPECT_EQ(t.encode_with_specials("<think>hello"), (std::vector<int32_t>{128821, 3 + kHello}));
}

TEST(HfTokenizerJson, AV4FileKeepsItsOwnTypesForV4Tokens) {
  json j = deepseek_like(128000 - base_size());
  j["added_tokens"].push_back({{"id", 128821}, {"content", "<think>"}, {"special", false}});
  const Vocab v = vocab_from_hf_tokenizer_json(j.dump());
  EXPECT_EQ(v.tokens[128821], "<think>");
  EXPECT_EQ(v.token_types[128821], static_cast<int32_t>(TokenType::kUserDefined));
  EXPECT_EQ(v.token_types[128822], static_cast<int32_t>(TokenType::kControl));
}

TEST(HfTokenizerJson, V4TokensListIsAscendingAboveV3) {
  int32_t last = 128814;
  for (const AddedTokenId& t : deepseek_v4_added_tokens()) {
    EXPECT_GT(t.id, last);
    EXPECT_LT(t.id, kDeepSeekV4VocabSize);
    last = t.id;
  }
  EXPECT_EQ(deepseek_v4_added_tokens().size(), 48u);
}

TEST(HfTokenizerJson, RejectsWhatTheTokenizerCannotReproduce) {
  const HfLoadOptions small{.vocab_size = base_size(), .add_v4_tokens = false};
  EXPECT_NE(error_of(json::parse("[1]"), small).find("model"), std::string::npos);
  json j = deepseek_like(0);
  j["model"]["type"] = "WordPiece";
  EXPECT_NE(error_of(j, small).find("BPE"), std::string::npos);
  j = deepseek_like(0);
  j["model"]["byte_fallback"] = true;
  EXPECT_NE(error_of(j, small).find("byte_fallback"), std::string::npos);
  j = deepseek_like(0);
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_NE(error_of(j, small).find("normalizer"), std::string::npos);
  j = deepseek_like(0);
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{N}{1,4}";
  EXPECT_NE(error_of(j, small).find("pre_tokenizer"), std::string::npos);
  j = deepseek_like(0);
  j["model"]["merges"][0] = 7;
  EXPECT_NE(error_of(j, small).find("merges[0]"), std::string::npos);
}

TEST(HfTokenizerJson, RejectsBadIds) {
  const HfLoadOptions small{.vocab_size = base_size(), .add_v4_tokens = false};
  json j = deepseek_like(0);
  j["added_tokens"].push_back({{"id", base_size()}, {"content", "<x>"}, {"special", true}});
  EXPECT_NE(error_of(j, small).find("outside"), std::string::npos);
  j = deepseek_like(0);
  j["added_tokens"].push_back({{"id", 5}, {"content", "<x>"}, {"special", true}});
  EXPECT_NE(error_of(j, small).find("claimed by both"), std::string::npos);
  j = deepseek_like(0);
  EXPECT_NE(error_of(j, {.vocab_size = base_size() + 2, .add_v4_tokens = false}).find("no token has id"), std::string::npos);
  j = deepseek_like(128000 - base_size());
  j["added_tokens"].push_back({{"id", 128821}, {"content", "<thinking>"}, {"special", false}});
  EXPECT_NE(error_of(j).find("DeepSeek V4 token"), std::string::npos);
  EXPECT_NE(error_of(deepseek_like(0), {.vocab_size = 0}).find("vocab_size"), std::string::npos);
}

TEST(HfTokenizerJson, ReportsUnreadableFiles) {
  EXPECT_THROW(load_hf_tokenizer_json("/nonexistent/tokenizer.json"), Error);
  EXPECT_THROW(vocab_from_hf_tokenizer_json("{not json"), Error);
}

}  // namespace
}  // namespace ds4::tok
