// plan_prefix (product-surface §3.9 steps 4-6) with the real tokenizer and renderer.
#include <gtest/gtest.h>

#include "chat/render.h"
#include "engine/engine.h"
#include "server/prefix_reuse.h"
#include "tokenizer/special_tokens.h"

namespace ds4::server {
namespace {

using oj = nlohmann::ordered_json;

class PrefixReuse : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = Engine::open_tokenizer(DS4_BINARY_DIR "/models/ds4-tiny-q2.gguf").release();
  }
  static void TearDownTestSuite() { delete tok_; }
  static std::vector<int32_t> enc(const std::string& s) { return tok_->encode_with_specials(s); }
  static inline tok::Tokenizer* tok_ = nullptr;
};

TEST_F(PrefixReuse, TokenPrefix) {
  const auto live = enc("<｜begin▁of▁sentence｜>Hello<｜User｜>");
  const std::string text = "<｜begin▁of▁sentence｜>Hello<｜User｜>more text";
  const auto prompt = enc(text);
  const auto plan = plan_prefix(*tok_, live, std::nullopt, prompt, text, 4096);
  EXPECT_EQ(plan.step, ReuseStep::token_prefix);
  EXPECT_EQ(plan.tokens, prompt);
  EXPECT_EQ(plan_prefix(*tok_, {}, std::nullopt, prompt, text, 4096).step, ReuseStep::none);
}

// The model sampled a tokenization the BPE would not produce for the whole text ("wor" + "ld"
// instead of "world"): the live tokens stay, only the remaining text is tokenized.
TEST_F(PrefixReuse, TextPrefixKeepsTheSampledTokens) {
  const std::string head = "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>Hello wor";
  auto live = enc(head);
  const auto ld = enc("ld");
  live.insert(live.end(), ld.begin(), ld.end());
  const std::string text = head + "ld, friend<｜end▁of▁sentence｜><｜User｜>again<｜Assistant｜></think>";
  const auto prompt = enc(text);
  ASSERT_NE(std::vector<int32_t>(prompt.begin(), prompt.begin() + live.size()), live)
      << "the fixture needs a tokenization that differs from the sampled one";
  const auto plan = plan_prefix(*tok_, live, std::nullopt, prompt, text, 4096);
  EXPECT_EQ(plan.step, ReuseStep::text_prefix);
  ASSERT_GE(plan.tokens.size(), live.size());
  EXPECT_TRUE(std::equal(live.begin(), live.end(), plan.tokens.begin()));
  EXPECT_EQ(tok_->decode(plan.tokens), text);
  // The same plan with too small a context falls back to the request's own tokens.
  const auto small = plan_prefix(*tok_, live, std::nullopt, prompt, text, static_cast<int64_t>(live.size()) + 1);
  EXPECT_EQ(small.step, ReuseStep::none);
  EXPECT_EQ(small.tokens, prompt);
  // Text that differs is not reused.
  const std::string other = head + "LD";
  EXPECT_EQ(plan_prefix(*tok_, live, std::nullopt, enc(other), other, 4096).step, ReuseStep::none);
}

TEST_F(PrefixReuse, TextPrefixNeedsACharacterBoundary) {
  // "é" is two bytes; a live session ending after its first byte cannot be continued by text.
  const std::string text = "<｜begin▁of▁sentence｜>caf\xC3\xA9!";
  const auto full = enc(text);
  std::vector<int32_t> live = enc("<｜begin▁of▁sentence｜>caf");
  const auto bytes = tok_->encode_plain("\xC3");  // the lone lead byte
  live.insert(live.end(), bytes.begin(), bytes.end());
  ASSERT_EQ(tok_->decode(live), "<｜begin▁of▁sentence｜>caf\xC3");
  EXPECT_NE(plan_prefix(*tok_, live, std::nullopt, full, text, 4096).step, ReuseStep::text_prefix);
}

// §3.9 step 5: after a thinking answer, the next request renders the turn without its reasoning.
// The alias key is exactly the start of that rendering, and the plan continues the live KV.
TEST_F(PrefixReuse, ThinkingVisibleAliasMatchesTheRenderer) {
  chat::RenderOptions ro;
  ro.think_mode = chat::ThinkMode::thinking;
  const oj first = oj::array({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "2+2?"}}});
  const std::string p1 = chat::render_prompt(first, ro);
  oj second = first;
  second.push_back({{"role", "assistant"}, {"reasoning_content", "Add them."}, {"content", "4"}});
  second.push_back({{"role", "user"}, {"content", "And 3+3?"}});
  const std::string p2 = chat::render_prompt(second, ro);
  const auto key = thinking_visible_key(p1, "4");
  ASSERT_TRUE(key);
  ASSERT_TRUE(p2.starts_with(*key)) << p2;
  EXPECT_FALSE(thinking_visible_key("no think", "4"));
  // The live session: the first prompt, the sampled reasoning and answer except its last token
  // (sampled, not evaluated), then EOS was sampled.
  auto live = enc(p1);
  const auto gen = enc("Add them.</think>4");
  live.insert(live.end(), gen.begin(), gen.end() - 1);
  const int32_t eos = *tok_->find_token(tok::kEosToken);
  VisibleAlias alias{*key, live.size(), {gen.back(), eos}};
  const auto prompt = enc(p2);
  const auto plan = plan_prefix(*tok_, live, alias, prompt, p2, 4096);
  EXPECT_EQ(plan.step, ReuseStep::thinking_visible);
  ASSERT_GT(plan.tokens.size(), live.size() + 2);
  EXPECT_TRUE(std::equal(live.begin(), live.end(), plan.tokens.begin()));
  EXPECT_EQ(plan.tokens[live.size()], gen.back());
  EXPECT_EQ(plan.tokens[live.size() + 1], eos);
  const std::vector<int32_t> rest(plan.tokens.begin() + static_cast<long>(live.size()) + 2, plan.tokens.end());
  EXPECT_EQ(tok_->decode(rest), p2.substr(key->size()));
  // A stale alias (the session moved on) is not used.
  VisibleAlias stale = alias;
  stale.live_tokens += 1;
  EXPECT_NE(plan_prefix(*tok_, live, stale, prompt, p2, 4096).step, ReuseStep::thinking_visible);
}

}  // namespace
}  // namespace ds4::server
