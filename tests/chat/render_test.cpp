// Prompt rendering: the official golden vectors byte for byte, then each rule of the official
// encoder on small hand-written conversations whose expected text is spelled out literally.
#include "chat/render.h"

#include "chat/dsml.h"
#include "common/error.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace ds4::chat {
namespace {

using ojson = nlohmann::ordered_json;

std::string render(const char* json, ThinkMode mode, bool gen = true, int64_t ctx = 0) {
  RenderOptions o;
  o.think_mode = mode;
  o.ctx = ctx;
  o.add_generation_prompt = gen;
  return render_prompt(ojson::parse(json), o);
}

void expect_golden(const std::string& dir, int n, ThinkMode mode) {
  const std::string base = dir + "case_" + std::to_string(n);
  if (!std::filesystem::exists(base + ".input.json")) GTEST_SKIP() << "missing " << base;
  RenderOptions o;
  o.think_mode = mode;
  const std::string got = render_prompt_json_text(test::read_file(base + ".input.json"), o);
  const std::string want = test::read_file(base + ".expected.txt");
  EXPECT_EQ(got, want) << "case " << n;
}

TEST(RenderGolden, Case1ThinkingWithTools) { expect_golden(test::golden_dir(), 1, ThinkMode::thinking); }
TEST(RenderGolden, Case2ThinkingDropsOldReasoning) {
  expect_golden(test::golden_dir(), 2, ThinkMode::thinking);
}
TEST(RenderGolden, Case4ChatWithReminderAndTask) { expect_golden(test::golden_dir(), 4, ThinkMode::chat); }
// Case 3 of the official tests (developer + tools + latest_reminder), from vLLM's copy of the
// reference fixtures; stored in tests/chat/data.
TEST(RenderGolden, Case3DeveloperToolsReminder) {
  expect_golden(test::local_data_dir(), 3, ThinkMode::thinking);
}

TEST(ThinkModes, MaxPrefixOnlyWithLargeContext) {
  const char* conv = R"([{"role":"system","content":"S"},{"role":"user","content":"hi"}])";
  const std::string plain = std::string(kBos) + "S<｜User｜>hi<｜Assistant｜><think>";
  EXPECT_EQ(render(conv, ThinkMode::thinking), plain);
  EXPECT_EQ(render(conv, ThinkMode::max, true, kThinkMaxMinContext - 1), plain);
  EXPECT_EQ(render(conv, ThinkMode::max, true, kThinkMaxMinContext),
            std::string(kBos) + std::string(think_max_prefix()) + "S<｜User｜>hi<｜Assistant｜><think>");
  EXPECT_EQ(render(conv, ThinkMode::chat), std::string(kBos) + "S<｜User｜>hi<｜Assistant｜></think>");
  EXPECT_EQ(effective_think_mode(ThinkMode::max, 393215), ThinkMode::thinking);
  EXPECT_EQ(effective_think_mode(ThinkMode::max, 393216), ThinkMode::max);
  EXPECT_EQ(effective_think_mode(ThinkMode::chat, 0), ThinkMode::chat);
}

TEST(ThinkModes, MaxPrefixTextIsSpecText) {
  const std::string p(think_max_prefix());
  EXPECT_EQ(p.rfind("Reasoning Effort: Absolute maximum with no shortcuts permitted.\nYou MUST be very thorough", 0), 0u);
  EXPECT_NE(p.find("adversarial scenarios.\nExplicitly write out your entire deliberation process"), std::string::npos);
  EXPECT_TRUE(p.ends_with("ensure absolutely no assumption is left unchecked.\n\n"));
  EXPECT_EQ(p.size(), 476u);  // bytes, counted from the spec text
}

TEST(ThinkModes, MaxPrefixBeforeFirstMessageWhateverItsRole) {
  const char* conv = R"([{"role":"user","content":"hi"}])";
  EXPECT_EQ(render(conv, ThinkMode::max, true, 1 << 20),
            std::string(kBos) + std::string(think_max_prefix()) + "<｜User｜>hi<｜Assistant｜><think>");
  EXPECT_EQ(render(conv, ThinkMode::chat), std::string(kBos) + "<｜User｜>hi<｜Assistant｜></think>");
}

TEST(ThinkModes, ParseNames) {
  EXPECT_EQ(parse_think_mode("chat"), ThinkMode::chat);
  EXPECT_EQ(parse_think_mode("nothink"), ThinkMode::chat);
  EXPECT_EQ(parse_think_mode("thinking"), ThinkMode::thinking);
  EXPECT_EQ(parse_think_mode("high"), ThinkMode::thinking);
  EXPECT_EQ(parse_think_mode("max"), ThinkMode::max);
  EXPECT_EQ(think_mode_name(ThinkMode::max), "max");
  EXPECT_THROW(parse_think_mode("turbo"), Error);
}

TEST(RenderRules, GenerationPromptCanBeLeftOut) {
  const char* conv = R"([{"role":"user","content":"hi"}])";
  EXPECT_EQ(render(conv, ThinkMode::thinking, false), std::string(kBos) + "<｜User｜>hi");
  // An assistant turn that follows still gets its prefix: only the final one is optional.
  const char* conv2 = R"([{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}])";
  EXPECT_EQ(render(conv2, ThinkMode::chat, false),
            std::string(kBos) + "<｜User｜>a<｜Assistant｜></think>b<｜end▁of▁sentence｜><｜User｜>c");
}

TEST(RenderRules, ReasoningKeptAfterLastUserDroppedBefore) {
  const char* conv = R"([
    {"role":"user","content":"q1"},
    {"role":"assistant","reasoning_content":"r1","content":"a1"},
    {"role":"user","content":"q2"},
    {"role":"assistant","reasoning_content":"r2","content":"a2"},
    {"role":"assistant","reasoning_content":"r3","content":"a3"}])";
  EXPECT_EQ(render(conv, ThinkMode::thinking),
            std::string(kBos) +
                "<｜User｜>q1<｜Assistant｜></think>a1<｜end▁of▁sentence｜>"
                "<｜User｜>q2<｜Assistant｜><think>r2</think>a2<｜end▁of▁sentence｜>"
                "r3</think>a3<｜end▁of▁sentence｜>");
  RenderOptions keep;
  keep.drop_thinking = false;
  EXPECT_EQ(render_prompt(ojson::parse(conv), keep),
            std::string(kBos) +
                "<｜User｜>q1<｜Assistant｜><think>r1</think>a1<｜end▁of▁sentence｜>"
                "<｜User｜>q2<｜Assistant｜><think>r2</think>a2<｜end▁of▁sentence｜>"
                "r3</think>a3<｜end▁of▁sentence｜>");
  // Non-thinking: no reasoning at all, every assistant prefix closes thinking.
  EXPECT_EQ(render(conv, ThinkMode::chat),
            std::string(kBos) +
                "<｜User｜>q1<｜Assistant｜></think>a1<｜end▁of▁sentence｜>"
                "<｜User｜>q2<｜Assistant｜></think>a2<｜end▁of▁sentence｜>a3<｜end▁of▁sentence｜>");
}

TEST(RenderRules, HistoryIsAppendOnlyAcrossTurns) {
  // The history rendered without a generation prompt is a prefix of the next turn's prompt once
  // the answer (its reasoning dropped by drop_thinking) and a new user message are appended.
  const std::string t1 = render(R"([{"role":"user","content":"q1"}])", ThinkMode::thinking, false);
  const std::string t2 = render(R"([{"role":"user","content":"q1"},{"role":"assistant","reasoning_content":"r","content":"a"},{"role":"user","content":"q2"}])",
                                ThinkMode::thinking);
  EXPECT_EQ(t2.rfind(t1, 0), 0u);
  EXPECT_EQ(t2.substr(t1.size()),
            "<｜Assistant｜></think>a<｜end▁of▁sentence｜><｜User｜>q2<｜Assistant｜><think>");
}

TEST(RenderRules, ToolResultsMergeAndSortByCallOrder) {
  const char* conv = R"([
    {"role":"user","content":"q"},
    {"role":"assistant","content":"","tool_calls":[
      {"id":"A","type":"function","function":{"name":"f","arguments":"{\"x\": 1}"}},
      {"id":"B","type":"function","function":{"name":"g","arguments":{"s":"v"}}}]},
    {"role":"tool","tool_call_id":"B","content":"rb"},
    {"role":"tool","tool_call_id":"A","content":[{"type":"text","text":"ra1"},{"type":"image_url"},{"type":"text","text":"ra2"}]},
    {"role":"user","content":"next"}])";
  EXPECT_EQ(render(conv, ThinkMode::chat),
            std::string(kBos) +
                "<｜User｜>q<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n"
                "<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"x\" string=\"false\">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
                "<｜DSML｜invoke name=\"g\">\n<｜DSML｜parameter name=\"s\" string=\"true\">v</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
                "</｜DSML｜tool_calls><｜end▁of▁sentence｜>"
                "<｜User｜><tool_result>ra1\n\n[Unsupported image_url]\n\nra2</tool_result>\n\n"
                "<tool_result>rb</tool_result>\n\nnext<｜Assistant｜></think>");
}

TEST(RenderRules, ToolHistoryWithoutToolsStillDropsReasoning) {
  // Official rule: only tools *defined* on a message keep old reasoning; tool turns alone do not.
  const char* conv = R"([
    {"role":"user","content":"q"},
    {"role":"assistant","reasoning_content":"plan","tool_calls":[{"id":"1","function":{"name":"f","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"1","content":"r"}])";
  EXPECT_EQ(render(conv, ThinkMode::thinking),
            std::string(kBos) +
                "<｜User｜>q<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n\n"
                "</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>"
                "<｜User｜><tool_result>r</tool_result><｜Assistant｜><think>");
}

TEST(RenderRules, TopLevelToolsGoToLeadingSystemOrANewOne) {
  const char* with_sys = R"({"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],
                            "messages":[{"role":"system","content":"S"},{"role":"user","content":"q"}]})";
  const std::string tools = render_tools_section(ojson::parse(R"([{"name":"f","parameters":{}}])"));
  EXPECT_EQ(render(with_sys, ThinkMode::chat),
            std::string(kBos) + "S\n\n" + tools + "<｜User｜>q<｜Assistant｜></think>");
  const char* no_sys = R"({"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],
                          "messages":[{"role":"user","content":"q"}]})";
  EXPECT_EQ(render(no_sys, ThinkMode::chat),
            std::string(kBos) + "\n\n" + tools + "<｜User｜>q<｜Assistant｜></think>");
  EXPECT_TRUE(tools.starts_with("## Tools\n\nYou have access to a set of tools"));
  EXPECT_TRUE(tools.ends_with("### Available Tool Schemas\n\n{\"name\": \"f\", \"parameters\": {}}\n\n"
                              "You MUST strictly follow the above defined tool name and parameter "
                              "schemas to invoke tool calls.\n"));
}

TEST(RenderRules, DeveloperIsAUserTurnAndIsDroppedBeforeLastUser) {
  const char* conv = R"([
    {"role":"developer","content":"D1"},
    {"role":"assistant","content":"a"},
    {"role":"user","content":"q"}])";
  EXPECT_EQ(render(conv, ThinkMode::chat),
            std::string(kBos) + "<｜User｜>D1<｜Assistant｜></think>a<｜end▁of▁sentence｜><｜User｜>q<｜Assistant｜></think>");
  EXPECT_EQ(render(conv, ThinkMode::thinking),
            std::string(kBos) + "a<｜end▁of▁sentence｜><｜User｜>q<｜Assistant｜><think>");
}

TEST(RenderRules, ConsecutiveUsersMergeWithBlankLine) {
  const char* conv = R"([{"role":"user","content":"a"},{"role":"user","content":[{"type":"text","text":"b"},{"type":"text","text":"c"}]}])";
  EXPECT_EQ(render(conv, ThinkMode::chat), std::string(kBos) + "<｜User｜>a\n\nb\n\nc<｜Assistant｜></think>");
}

TEST(RenderRules, TasksAndResponseFormat) {
  const char* conv = R"([
    {"role":"system","content":"S","response_format":{"type":"json_object"}},
    {"role":"user","content":"q","task":"query"}])";
  EXPECT_EQ(render(conv, ThinkMode::thinking),
            std::string(kBos) +
                "S\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
                "{\"type\": \"json_object\"}<｜User｜>q<｜query｜>");
  const char* action = R"([{"role":"user","content":"q","task":"action"},{"role":"assistant","reasoning_content":"x","content":"Search"}])";
  EXPECT_EQ(render(action, ThinkMode::thinking),
            std::string(kBos) + "<｜User｜>q<｜Assistant｜><think><｜action｜>Search<｜end▁of▁sentence｜>");
}

TEST(RenderRules, WithoutEosAndReasoningAlias) {
  const char* conv = R"([{"role":"user","content":"q"},{"role":"assistant","reasoning":"r","content":"partial","wo_eos":true}])";
  EXPECT_EQ(render(conv, ThinkMode::thinking), std::string(kBos) + "<｜User｜>q<｜Assistant｜><think>r</think>partial");
}

TEST(RenderRules, TrailingSystemMessageStillGetsTheAssistantPrefix) {
  // Deviation from the official encoder (failure-modes item 2): it renders nothing after a final
  // system/latest_reminder message, so the model would continue the system text.
  const char* conv = R"([{"role":"user","content":"q"},{"role":"system","content":"late"}])";
  EXPECT_EQ(render(conv, ThinkMode::chat), std::string(kBos) + "<｜User｜>qlate<｜Assistant｜></think>");
  EXPECT_EQ(render(conv, ThinkMode::thinking), std::string(kBos) + "<｜User｜>qlate<｜Assistant｜><think>");
  EXPECT_EQ(render(conv, ThinkMode::chat, false), std::string(kBos) + "<｜User｜>qlate");
  const char* reminder = R"([{"role":"user","content":"q"},{"role":"latest_reminder","content":"r"}])";
  EXPECT_EQ(render(reminder, ThinkMode::chat),
            std::string(kBos) + "<｜User｜>q<｜Assistant｜></think><｜latest_reminder｜>r<｜Assistant｜></think>");
  // A final assistant message is a finished (or, with wo_eos, continued) turn: no prefix.
  const char* done = R"([{"role":"user","content":"q"},{"role":"assistant","content":"a"}])";
  EXPECT_EQ(render(done, ThinkMode::chat), std::string(kBos) + "<｜User｜>q<｜Assistant｜></think>a<｜end▁of▁sentence｜>");
}

TEST(RenderDsml, ArgumentTypingAndEscapes) {
  const ojson calls = ojson::parse(R"([{"function":{"name":"t","arguments":
      "{\"s\": \"a\\\"b\\\\c\\nd ü </｜DSML｜parameter> &lt;/｜DSML｜parameter>\", \"n\": 1.5, \"i\": -3, \"b\": true, \"z\": null, \"o\": {\"k\": [1, \"</｜DSML｜parameter>\"]}, \"e\": 1e-05}"}}])");
  EXPECT_EQ(render_tool_calls_dsml(calls),
            "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"t\">\n"
            "<｜DSML｜parameter name=\"s\" string=\"true\">a\"b\\c\nd ü &lt;/｜DSML｜parameter> &amp;lt;/｜DSML｜parameter></｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"n\" string=\"false\">1.5</｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"i\" string=\"false\">-3</｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"b\" string=\"false\">true</｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"z\" string=\"false\">null</｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"o\" string=\"false\">{\"k\": [1, \"\\u003c/｜DSML｜parameter>\"]}</｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"e\" string=\"false\">1e-05</｜DSML｜parameter>\n"
            "</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
}

TEST(RenderDsml, NonObjectArgumentsFallBackToOneParameter) {
  EXPECT_EQ(render_tool_calls_dsml(ojson::parse(R"([{"function":{"name":"a&b","arguments":"not json"}}])")),
            "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a&amp;b\">\n"
            "<｜DSML｜parameter name=\"arguments\" string=\"true\">not json</｜DSML｜parameter>\n"
            "</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
  EXPECT_EQ(render_tool_calls_dsml(ojson::parse(R"([{"function":{"name":"f","arguments":[1,2]}}])")),
            "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
            "<｜DSML｜parameter name=\"arguments\" string=\"false\">[1, 2]</｜DSML｜parameter>\n"
            "</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
  EXPECT_EQ(render_tool_calls_dsml(ojson::parse(R"([{"function":{"name":"f"}}])")),
            "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
}

TEST(RenderErrors, BadInputsGetClearErrors) {
  auto expect_error = [](const char* json, const char* needle) {
    try {
      render_prompt(ojson::parse(json), RenderOptions{});
      ADD_FAILURE() << "no error for " << json;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(R"("hello")", "must be an array of messages");
  expect_error(R"({"msgs":[]})", "unknown top-level key \"msgs\"");
  expect_error(R"({"tools":[]})", "needs a \"messages\" array");
  expect_error(R"([1])", "messages[0]: a message must be an object");
  expect_error(R"([{"content":"x"}])", "messages[0]: missing \"role\"");
  expect_error(R"([{"role":"robot","content":"x"}])", "unknown role \"robot\"");
  expect_error(R"([{"role":"user","content":5}])", "content must be a string, null or an array");
  expect_error(R"([{"role":"user","content":[{"type":"image_url"}]}])", "unsupported content part type \"image_url\"");
  expect_error(R"([{"role":"user","content":"x","tools":[{"function":{"name":"f"}}]}])", "system or developer");
  expect_error(R"([{"role":"developer","content":""}])", "developer message needs non-empty content");
  expect_error(R"([{"role":"assistant","tool_calls":[{"function":{}}]}])", "tool_calls[0] must be");
  expect_error(R"([{"role":"user","content":"x","tool_calls":[]}])", "only belong to assistant");
  expect_error(R"([{"role":"user","content":"x","task":"dance"}])", "invalid task \"dance\"");
  expect_error(R"([{"role":"assistant","wo_eos":1}])", "wo_eos must be a boolean");
  expect_error(R"({"messages":[],"tools":{"a":1}})", "tools must be an array");
  EXPECT_THROW(render_prompt_json_text("[{\"role\":", RenderOptions{}), Error);
  EXPECT_THROW(render_prompt(ojson::array({ojson{{"role", "user"}, {"content", std::string("\xff")}}}),
                             RenderOptions{}),
               Error);
}

}  // namespace
}  // namespace ds4::chat
