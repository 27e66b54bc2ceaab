#include "server/request_common.h"

#include <gtest/gtest.h>

#include "server/api_error.h"

namespace ds4::server {
namespace {

using chat::ThinkMode;

int status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e.status;
  }
  return 0;
}

TEST(RequestCommon, ParseJsonBodyErrors) {
  EXPECT_EQ(status_of([] { parse_json_body("{not json"); }), 400);
  EXPECT_EQ(status_of([] { parse_json_body("[1,2]"); }), 400);
  EXPECT_EQ(status_of([] { parse_json_body("{\"a\":\"\xff\"}"); }), 400);  // invalid UTF-8
  std::string deep(300, '[');
  deep = "{\"a\":" + deep + std::string(300, ']') + "}";
  EXPECT_EQ(status_of([&] { parse_json_body(deep); }), 400);
  // 255 levels inside the object: 256 in all, accepted.
  std::string ok = "{\"a\":" + std::string(255, '[') + std::string(255, ']') + "}";
  EXPECT_EQ(parse_json_body(ok)["a"].size(), 1u);
  // Brackets inside strings do not count.
  EXPECT_EQ(parse_json_body("{\"a\":\"" + std::string(400, '[') + "\"}")["a"].get<std::string>().size(), 400u);
}

TEST(RequestCommon, EffortNames) {
  for (const char* s : {"max", "xhigh", "high", "medium", "low", "minimal", "none"})
    EXPECT_EQ(read_effort(ojson(s), "e"), std::string(s));
  EXPECT_EQ(read_effort(ojson(), "e"), std::nullopt);
  EXPECT_EQ(status_of([] { read_effort(ojson("extreme"), "e"); }), 400);
  EXPECT_EQ(status_of([] { read_effort(ojson(3), "e"); }), 400);
}

ThinkMode mode_of(const ojson& body, const std::string& model, int64_t ctx = 32768) {
  ThinkingRequest t;
  read_thinking_switch(body, t);
  if (body.contains("reasoning_effort")) t.effort = read_effort(body["reasoning_effort"], "r");
  return resolve_think_mode(t, model, ctx);
}

// product-surface §3.3.
TEST(RequestCommon, ThinkingModeMapping) {
  const std::string m = "deepseek-v4-flash";
  EXPECT_EQ(mode_of(ojson::object(), m), ThinkMode::thinking);  // default HIGH
  EXPECT_EQ(mode_of({{"thinking", {{"type", "disabled"}}}}, m), ThinkMode::chat);
  EXPECT_EQ(mode_of({{"think", false}}, m), ThinkMode::chat);
  EXPECT_EQ(mode_of({{"reasoning_effort", "none"}}, m), ThinkMode::chat);
  EXPECT_EQ(mode_of({{"reasoning_effort", "low"}}, m), ThinkMode::thinking);
  EXPECT_EQ(mode_of({{"reasoning_effort", nullptr}}, m), ThinkMode::thinking);
  // MAX needs ctx >= 393216.
  EXPECT_EQ(mode_of({{"reasoning_effort", "max"}}, m, 32768), ThinkMode::thinking);
  EXPECT_EQ(mode_of({{"reasoning_effort", "max"}}, m, 393216), ThinkMode::max);
  // Aliases only without an explicit switch.
  EXPECT_EQ(mode_of(ojson::object(), "deepseek-chat"), ThinkMode::chat);
  EXPECT_EQ(mode_of({{"reasoning_effort", "high"}}, "deepseek-chat"), ThinkMode::chat);
  EXPECT_EQ(mode_of({{"think", true}}, "deepseek-chat"), ThinkMode::thinking);
  EXPECT_EQ(mode_of({{"thinking", {{"type", "disabled"}}}}, "deepseek-reasoner"), ThinkMode::chat);
  EXPECT_EQ(mode_of(ojson::object(), "deepseek-reasoner"), ThinkMode::thinking);
  EXPECT_EQ(status_of([&] { mode_of({{"thinking", {{"type", "sometimes"}}}}, m); }), 400);
  EXPECT_EQ(status_of([&] { mode_of({{"think", "yes"}}, m); }), 400);
}

TEST(RequestCommon, SamplingDefaultsAndThinkingOverride) {
  const ojson body = {{"temperature", 0.2}, {"top_p", 0.5}, {"min_p", 0.1}, {"top_k", 40}, {"seed", 7}};
  const std::vector<std::string_view> all = {"temperature", "top_p", "min_p", "top_k", "seed"};
  const auto chat = read_sampling(body, false, all);
  EXPECT_FLOAT_EQ(chat.temperature, 0.2f);
  EXPECT_FLOAT_EQ(chat.top_p, 0.5f);
  EXPECT_FLOAT_EQ(chat.min_p, 0.1f);
  EXPECT_EQ(chat.top_k, 40);
  EXPECT_EQ(chat.seed, 7u);
  const auto think = read_sampling(body, true, all);  // knobs ignored, seed kept
  EXPECT_FLOAT_EQ(think.temperature, 1.0f);
  EXPECT_FLOAT_EQ(think.top_p, 1.0f);
  EXPECT_FLOAT_EQ(think.min_p, 0.05f);
  EXPECT_EQ(think.top_k, 0);
  EXPECT_EQ(think.seed, 7u);
  const auto def = read_sampling(ojson::object(), false, all);
  EXPECT_FLOAT_EQ(def.temperature, 1.0f);
  EXPECT_FLOAT_EQ(def.min_p, 0.05f);
  // Keys not listed are not read (Anthropic has no min_p).
  EXPECT_FLOAT_EQ(read_sampling({{"min_p", 0.5}}, false, {"temperature"}).min_p, 0.05f);
  EXPECT_EQ(status_of([&] { read_sampling({{"temperature", -1}}, false, all); }), 400);
  EXPECT_EQ(status_of([&] { read_sampling({{"top_p", 1.5}}, false, all); }), 400);
  EXPECT_EQ(status_of([&] { read_sampling({{"top_k", 1.5}}, false, all); }), 400);
  EXPECT_EQ(status_of([&] { read_sampling({{"seed", -3}}, false, all); }), 400);
  EXPECT_EQ(status_of([&] { read_sampling({{"temperature", "hot"}}, false, all); }), 400);
}

TEST(RequestCommon, MaxTokensAndStop) {
  EXPECT_EQ(read_max_tokens(ojson::object(), {"max_tokens"}, 99), 99);
  EXPECT_EQ(read_max_tokens({{"max_tokens", 5}}, {"max_tokens"}, 99), 5);
  EXPECT_EQ(read_max_tokens({{"a", 3}, {"b", 4}}, {"b", "a"}, 99), 4);
  EXPECT_EQ(read_max_tokens({{"max_tokens", nullptr}}, {"max_tokens"}, 99), 99);
  EXPECT_EQ(status_of([] { read_max_tokens({{"max_tokens", 0}}, {"max_tokens"}, 1); }), 400);
  EXPECT_EQ(status_of([] { read_max_tokens({{"max_tokens", "8"}}, {"max_tokens"}, 1); }), 400);
  EXPECT_EQ(read_stop(ojson("x"), "stop"), std::vector<std::string>{"x"});
  EXPECT_EQ(read_stop(ojson::array({"a", "b"}), "stop"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(read_stop(ojson(), "stop").empty());
  EXPECT_EQ(status_of([] { read_stop(ojson::array({1}), "stop"); }), 400);
  EXPECT_EQ(status_of([] { read_stop(ojson(3), "stop"); }), 400);
}

TEST(RequestCommon, ContentText) {
  EXPECT_EQ(content_text(ojson("a"), "c"), "a");
  EXPECT_EQ(content_text(ojson(), "c"), "");
  EXPECT_EQ(content_text(ojson::array({{{"type", "text"}, {"text", "a"}}, {{"type", "image_url"}},
                                       {{"type", "text"}, {"text", "b"}}}),
                         "c"),
            "ab");
  EXPECT_EQ(status_of([] { content_text(ojson(5), "c"); }), 400);
}

}  // namespace
}  // namespace ds4::server

#include <unistd.h>

#include <filesystem>

#include "engine/engine.h"
#include "server/kv_disk_cache.h"

namespace ds4::server {
namespace {

// A restarted server (empty tool memory) learns the exact DSML of tool ids in the history from
// the KTM sections of its disk snapshots before rendering (product-surface §3.9).
TEST(RequestCommon, ToolIdsFromDiskSnapshotsAreReplayed) {
  const std::string dir = "/tmp/ds4_ktm_render_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const std::string raw = " <tool_calls><invoke name=\"f\"></invoke></tool_calls>";
  {
    KvDiskCache cache({.dir = dir, .budget_bytes = 1 << 20, .min_tokens = 1, .cold_max_tokens = 100,
                       .reject_different_quant = false, .quant_bits = 2, .ctx = 4096});
    const std::vector<ToolBlock> blocks = {{{"call_disk"}, raw}};
    ASSERT_TRUE(cache.store("x" + raw + "y", 3, std::vector<uint8_t>(8, 0), SaveReason::evict, blocks));
  }
  auto tokenizer = Engine::open_tokenizer(DS4_BINARY_DIR "/models/ds4-tiny-q2.gguf");
  ToolMemory memory;
  ServerInfo info;
  info.tokenizer = tokenizer.get();
  info.ctx = 4096;
  info.tool_memory = &memory;
  info.kv_disk_dir = dir;
  const ojson conv = {{"messages",
                       {{{"role", "user"}, {"content", "q"}},
                        {{"role", "assistant"}, {"content", "A"},
                         {"tool_calls", {{{"id", "call_disk"}, {"type", "function"},
                                          {"function", {{"name", "f"}, {"arguments", "{}"}}}}}}},
                        {{"role", "tool"}, {"tool_call_id", "call_disk"}, {"content", "r"}}}}};
  std::string text;
  render_and_tokenize(info, conv, ThinkMode::chat, "messages", &text);
  EXPECT_NE(text.find("A" + raw + "<｜end▁of▁sentence｜>"), std::string::npos) << text;
  EXPECT_TRUE(memory.has("call_disk"));
  // Without the disk folder the same history renders canonically.
  ToolMemory empty;
  info.tool_memory = &empty;
  info.kv_disk_dir.clear();
  render_and_tokenize(info, conv, ThinkMode::chat, "messages", &text);
  EXPECT_EQ(text.find(raw), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ds4::server
