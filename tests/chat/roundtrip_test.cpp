// Round trip JSON -> DSML -> JSON: tool calls rendered into a prompt by the renderer and parsed
// back by the output parser give the same name and the same arguments (same values, same key
// order) for a battery of argument values, in non-thinking and thinking turns.
#include "chat/output_parser.h"
#include "chat/render.h"

#include "chat/dsml.h"
#include "parser_support.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>

namespace ds4::chat {
namespace {

using ojson = nlohmann::ordered_json;

// Values that stress the typing and escaping rules in both directions.
std::vector<ojson> battery() {
  return {
      "", " ", "plain", "quote \" backslash \\ newline \n tab \t cr \r", "ü 中文 😀 \u2028",
      std::string("nul \u0001 and \u001f controls"), "</｜DSML｜parameter>", "a</｜DSML｜parameter>b</｜DSML｜parameter>",
      "&lt;/｜DSML｜parameter>", "&amp;lt;/｜DSML｜parameter>", "&amp;amp;lt;/｜DSML｜parameter>",
      "&</｜DSML｜parameter>", "<｜DSML｜invoke name=\"x\">", "</｜DSML｜invoke>", "</｜DSML｜tool_calls>",
      "<｜DSML｜tool_calls>", "&amp; &lt; &gt; &quot; &apos;", "<think>x</think>", "</think>",
      "a</parameter>b", "trailing space ", "\n\nleading newlines", "<", "&", "&lt;", "</｜DSML｜parameter",
      0, -1, 42, 1.5, -0.25, 1e-7, 1e300, 0.1, 123456789.125, 9007199254740993LL,
      std::numeric_limits<int64_t>::min(), std::numeric_limits<uint64_t>::max(), true, false, nullptr,
      ojson::array(), ojson::object(), ojson::parse(R"([1, "a", [null, {"k": "</｜DSML｜parameter>"}], -2.5])"),
      ojson::parse(R"({"z": 1, "a": {"nested": "\"</｜DSML｜parameter>\"", "list": [true]}, "m": "中"})"),
  };
}

// Renders [user, assistant(tool_calls)] and returns the assistant's generated part.
std::string render_assistant_part(const ojson& assistant, ThinkMode mode) {
  const ojson conv = ojson::array({ojson{{"role", "user"}, {"content", "q"}}, assistant});
  RenderOptions o;
  o.think_mode = mode;
  const std::string prompt = render_prompt(conv, o);
  const std::string head = std::string(kBos) + "<｜User｜>q<｜Assistant｜>" +
                           std::string(mode == ThinkMode::chat ? kThinkEnd : kThinkStart);
  EXPECT_EQ(prompt.rfind(head, 0), 0u);
  EXPECT_TRUE(prompt.ends_with(kEos));
  return prompt.substr(head.size(), prompt.size() - head.size() - kEos.size());
}

void expect_round_trip(const ojson& calls, const std::string& content, const std::string& reasoning,
                       ThinkMode mode, bool args_as_string) {
  ojson wire = calls;
  if (args_as_string) {
    for (auto& c : wire) c["function"]["arguments"] = c["function"]["arguments"].dump();
  }
  ojson assistant{{"role", "assistant"}, {"content", content}, {"tool_calls", wire}};
  if (!reasoning.empty()) assistant["reasoning_content"] = reasoning;
  const std::string text = render_assistant_part(assistant, mode);
  const ParseOptions opts{mode != ThinkMode::chat, true};
  const ParsedOutput got = parse_output(text, opts);
  EXPECT_EQ(got.content, content);
  EXPECT_EQ(got.reasoning_content, mode == ThinkMode::chat ? "" : reasoning);
  EXPECT_TRUE(got.warnings.empty()) << got.warnings.front();
  EXPECT_FALSE(got.unterminated_tool_block);
  ASSERT_EQ(got.tool_calls.size(), calls.size()) << text;
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(got.tool_calls[i].name, calls[i]["function"]["name"].get<std::string>());
    const ojson back = ojson::parse(got.tool_calls[i].arguments);
    EXPECT_EQ(back, calls[i]["function"]["arguments"]) << text;  // ordered: same key order too
    EXPECT_EQ(back.dump(), calls[i]["function"]["arguments"].dump());
  }
}

ojson call(const std::string& name, const ojson& args) {
  return ojson{{"type", "function"}, {"function", {{"name", name}, {"arguments", args}}}};
}

TEST(RoundTrip, EachValueAloneInEveryMode) {
  for (const ojson& v : battery()) {
    SCOPED_TRACE(v.dump());
    const ojson calls = ojson::array({call("f", ojson{{"v", v}})});
    expect_round_trip(calls, "", "", ThinkMode::chat, true);
    expect_round_trip(calls, "Let me look.", "why <think> not", ThinkMode::thinking, false);
  }
}

TEST(RoundTrip, AllValuesInOneCallAndWeirdNames) {
  ojson args = ojson::object();
  int i = 0;
  for (const ojson& v : battery()) args[fmt::format("k{}", i++)] = v;
  args["a\"b"] = 1;
  args["x<y>&z"] = "v";
  args["中文 key"] = "中文 value";
  args[""] = "empty key";
  const ojson calls = ojson::array(
      {call("get_weather", args), call("a&b<c>\"d", ojson::object()), call("工具", ojson{{"n", 1}})});
  expect_round_trip(calls, "", "", ThinkMode::chat, true);
  expect_round_trip(calls, "Calling three tools.", "r", ThinkMode::thinking, true);
}

TEST(RoundTrip, RenderedDsmlParsesUnderEverySplit) {
  const ojson calls = ojson::array({call("f", ojson{{"s", "a</｜DSML｜parameter>&amp;lt;/｜DSML｜parameter>😀"},
                                                      {"o", ojson::parse(R"({"k": [1, "</｜DSML｜parameter>"]})")}})});
  const std::string text =
      render_assistant_part(ojson{{"role", "assistant"}, {"content", "x"}, {"tool_calls", calls}}, ThinkMode::chat);
  test::check_split_invariance(text, ParseOptions{false, true});
}

}  // namespace
}  // namespace ds4::chat
