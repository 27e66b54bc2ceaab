// Output parser: hand-written expectations for well-formed output, the golden vectors' assistant
// turns, every malformed-output rule of docs/chat-encoding.md, and for each fixture the same
// result and events for every way of splitting the text (failure-modes items 1, 4, 5, 6).
#include "chat/output_parser.h"

#include "chat/dsml.h"
#include "parser_support.h"
#include "test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>

namespace ds4::chat {
namespace {

// DSML builders in the canonical layout the official encoder writes.
std::string P(std::string_view name, std::string_view type, std::string_view value) {
  return fmt::format("<｜DSML｜parameter name=\"{}\" string=\"{}\">{}</｜DSML｜parameter>\n", name,
                     type, value);
}
std::string I(std::string_view name, std::string_view params) {
  return fmt::format("<｜DSML｜invoke name=\"{}\">\n{}</｜DSML｜invoke>\n", name, params);
}
std::string B(std::string_view invokes) {
  return fmt::format("\n\n<｜DSML｜tool_calls>\n{}</｜DSML｜tool_calls>", invokes);
}

struct Expect {
  Expect() = default;
  Expect(std::string r, std::string c, std::vector<ParsedToolCall> k = {})
      : reasoning(std::move(r)), content(std::move(c)), calls(std::move(k)) {}
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> calls;
  bool unterminated_reasoning = false;
  bool unterminated_block = false;
  std::vector<std::string> warnings;  // substrings, one per warning, in order
};

ParseOptions thinking() { return ParseOptions{true, true}; }
ParseOptions chat() { return ParseOptions{false, true}; }

void expect_parse(std::string_view text, const ParseOptions& options, const Expect& want,
                  size_t pair_limit = 320) {
  const ParsedOutput got = parse_output(text, options);
  EXPECT_EQ(got.reasoning_content, want.reasoning);
  EXPECT_EQ(got.content, want.content);
  EXPECT_EQ(got.tool_calls, want.calls);
  EXPECT_EQ(got.unterminated_reasoning, want.unterminated_reasoning);
  EXPECT_EQ(got.unterminated_tool_block, want.unterminated_block);
  EXPECT_EQ(got.warnings.size(), want.warnings.size());
  for (size_t i = 0; i < std::min(got.warnings.size(), want.warnings.size()); ++i) {
    EXPECT_NE(got.warnings[i].find(want.warnings[i]), std::string::npos)
        << "warning " << i << ": " << got.warnings[i];
  }
  test::check_split_invariance(text, options, pair_limit);
}

// ---- well-formed output ---------------------------------------------------------------------

TEST(ParseWellFormed, ThinkingThenAnswer) {
  expect_parse("Let me think: 2+2.</think>It is 4.", thinking(), {"Let me think: 2+2.", "It is 4."});
}

TEST(ParseWellFormed, NoThinkingOutput) {
  expect_parse("Plain answer\n\nwith a paragraph.  ", chat(), {"", "Plain answer\n\nwith a paragraph.  "});
}

TEST(ParseWellFormed, ThinkingOnlyOutputIsUnterminatedReasoning) {
  Expect e{"still thinking <｜DSML｜tool_calls> is just text here", ""};
  e.unterminated_reasoning = true;
  expect_parse("still thinking <｜DSML｜tool_calls> is just text here", thinking(), e);
}

TEST(ParseWellFormed, MultiByteTextAcrossEverySplit) {
  // 2-, 3- and 4-byte characters next to the markers; deltas never hold half a character.
  expect_parse("é中😀</think>😀 ü\n中文 </think>", thinking(), {"é中😀", "😀 ü\n中文 </think>"});
}

TEST(ParseWellFormed, EmptyText) {
  Expect e;
  e.unterminated_reasoning = true;
  expect_parse("", thinking(), e);
  expect_parse("", chat(), {});
}

TEST(ParseWellFormed, TypedArgumentsAndMultipleCalls) {
  const std::string text =
      "Let me check." +
      B(I("calc", P("n", "false", "1.5") + P("i", "false", "-42") +
                      P("big", "false", "123456789012345678901234567890") + P("b", "false", "true") +
                      P("z", "false", "null") + P("o", "false", R"({"k": [1, 2.0, "x"], "e": {}})") +
                      P("arr", "false", " [ ]\n")) +
        I("echo", P("s", "true",
                    "say \"hi\"\\path\nline2\ttab 😀 &lt;/｜DSML｜parameter> &amp;lt;/｜DSML｜parameter> "
                    "&amp; &lt;b&gt; &quot;")) +
        I("noargs", ""));
  Expect e{"", "Let me check."};
  e.calls = {
      {"calc", R"({"n":1.5,"i":-42,"big":123456789012345678901234567890,"b":true,"z":null,"o":{"k":[1,2.0,"x"],"e":{}},"arr":[]})"},
      {"echo", R"({"s":"say \"hi\"\\path\nline2\ttab 😀 </｜DSML｜parameter> &lt;/｜DSML｜parameter> &amp; &lt;b&gt; &quot;"})"},
      {"noargs", "{}"}};
  expect_parse(text, chat(), e);
}

TEST(ParseWellFormed, StringValueWithControlAndUnicodeEscapesToJson) {
  const std::string text = "</think>" + B(I("f", P("s", "true", std::string("a\x01\x1f\x7f\"") + "\\u0041")));
  Expect e;
  e.calls = {{"f", R"({"s":"a\u0001\u001f)" "\x7f" R"(\"\\u0041"})"}};
  expect_parse(text, thinking(), e);
}

TEST(ParseWellFormed, ToolCallAfterReasoningAndContent) {
  const std::string text = "plan</think>Calling now." + B(I("get", P("id", "false", "7")));
  expect_parse(text, thinking(), {"plan", "Calling now.", {{"get", R"({"id":7})"}}});
}

TEST(ParseWellFormed, OtherSpellings) {
  expect_parse("x\n<tool_calls>\n<invoke name=\"f\">\n<parameter name=\"a\" string=\"true\">v</parameter>\n"
               "</invoke>\n</tool_calls>",
               chat(), {"", "x", {{"f", R"({"a":"v"})"}}});
  expect_parse("<DSML｜tool_calls><DSML｜invoke name=\"f\"><DSML｜parameter name=\"a\" string=\"false\">[1]"
               "</DSML｜parameter></DSML｜invoke></DSML｜tool_calls>",
               chat(), {"", "", {{"f", R"({"a":[1]})"}}});
}

TEST(ParseWellFormed, AttributeEntitiesAndSpacing) {
  expect_parse("<｜DSML｜tool_calls>\n<｜DSML｜invoke   name = \"a&amp;b&quot;\" >\n"
               "<｜DSML｜parameter string=\"true\" name=\"k&lt;&gt;&apos;\">v</｜DSML｜parameter>\n"
               "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
               chat(), {"", "", {{"a&b\"", R"({"k<>'":"v"})"}}});
}

TEST(ParseWellFormed, TextAfterTheBlockIsContent) {
  expect_parse(std::string("A").append(B(I("f", ""))).append("\n\nB"), chat(), {"", "AB", {{"f", "{}"}}});
}

TEST(ParseWellFormed, ToolsDisabledLeavesDsmlAsContent) {
  const std::string text = std::string("A").append(B(I("f", P("a", "true", "v"))));
  expect_parse(text, ParseOptions{false, false}, {"", text});
}

TEST(ParseWellFormed, LeadingThinkTagOpensReasoning) {
  expect_parse("<think>r</think>c", chat(), {"r", "c"});
  Expect e{"r", "c"};
  e.warnings = {"doubled <think>"};
  expect_parse("<think>r</think>c", thinking(), e);
  expect_parse("<thin", chat(), {"", "<thin"});
}

TEST(ParseWellFormed, InvalidUtf8BecomesReplacementCharacter) {
  expect_parse("a\xff" "b\xe4\xb8</think>c\xf0\x9f\x98", thinking(), {"a\uFFFDb\uFFFD", "c\uFFFD"});
}

// ---- golden vectors: the assistant turns of the official prompts -----------------------------

struct Turn {
  std::string text;
  bool thinking;
};

// The assistant turns of a rendered prompt: the text after each "<｜Assistant｜><think>" or
// "<｜Assistant｜></think>" up to the next end-of-sentence token.
std::vector<Turn> assistant_turns(const std::string& prompt) {
  std::vector<Turn> out;
  for (size_t p = prompt.find(kAssistantToken); p != std::string::npos;
       p = prompt.find(kAssistantToken, p + 1)) {
    size_t start = p + kAssistantToken.size();
    bool thinking = false;
    if (prompt.compare(start, kThinkStart.size(), kThinkStart) == 0) {
      thinking = true;
      start += kThinkStart.size();
    } else if (prompt.compare(start, kThinkEnd.size(), kThinkEnd) == 0) {
      start += kThinkEnd.size();
    }
    const size_t end = prompt.find(kEos, start);
    if (end == std::string::npos) continue;
    out.push_back({prompt.substr(start, end - start), thinking});
  }
  return out;
}

std::vector<Turn> golden_turns(const std::string& path) {
  if (!std::filesystem::exists(path)) return {};
  return assistant_turns(test::read_file(path));
}

TEST(ParseGolden, Case1ToolCallAndAnswer) {
  const auto turns = golden_turns(test::golden_dir() + "case_1.expected.txt");
  if (turns.empty()) GTEST_SKIP() << "golden vectors not found";
  ASSERT_EQ(turns.size(), 2u);
  ASSERT_TRUE(turns[0].thinking);
  expect_parse(turns[0].text, thinking(),
               {"The user wants to know the weather in Beijing. I should use the get_weather tool.",
                "",
                {{"get_weather", R"({"location":"Beijing","unit":"celsius"})"}}});
  expect_parse(turns[1].text, thinking(),
               {"Got the weather data. Let me format a nice response.",
                "The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity."});
}

TEST(ParseGolden, Case2And3And4Answers) {
  const auto t2 = golden_turns(test::golden_dir() + "case_2.expected.txt");
  const auto t4 = golden_turns(test::golden_dir() + "case_4.expected.txt");
  const auto t3 = golden_turns(test::local_data_dir() + "case_3.expected.txt");
  if (t2.empty() || t4.empty()) GTEST_SKIP() << "golden vectors not found";
  ASSERT_EQ(t2.size(), 2u);
  expect_parse(t2[0].text, chat(), {"", "Hi there! How can I help you?"});
  expect_parse(t2[1].text, thinking(),
               {"The user asks about the capital of France. It is Paris.", "The capital of France is Paris."});
  ASSERT_EQ(t3.size(), 2u);
  expect_parse(t3[0].text, thinking(),
               {"用户想知道小柴胡冲剂和布洛芬能否一起服用。", "",
                {{"search", R"({"queries":"小柴胡冲剂 布洛芬 相互作用 一起吃"})"}}});
  expect_parse(t3[1].text, thinking(), {"现在开始组织回答。", "请及时就医。"});
  ASSERT_EQ(t4.size(), 2u);
  ASSERT_FALSE(t4[0].thinking);
  EXPECT_EQ(parse_output(t4[0].text, chat()).content, t4[0].text);  // long CJK/emoji answer
  test::check_split_invariance(t4[0].text, chat());
  EXPECT_EQ(t4[1].text, "<｜action｜>Search");
}

// ---- malformed output: each recovery rule ----------------------------------------------------

TEST(ParseMalformed, ToolCallBeforeThinkEndStaysReasoning) {
  const std::string block = B(I("f", P("a", "true", "v")));
  Expect e{"plan" + block, ""};
  e.unterminated_reasoning = true;
  expect_parse("plan" + block, thinking(), e);
  expect_parse("plan" + block + "</think>done", thinking(), {"plan" + block, "done"});
}

TEST(ParseMalformed, DoubledThinkEndIsContent) {
  expect_parse("r</think></think>c", thinking(), {"r", "</think>c"});
}

TEST(ParseMalformed, MissingInvokeCloseBeforeNextInvoke) {
  const std::string text = "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n" + P("x", "false", "1") +
                           "<｜DSML｜invoke name=\"b\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  Expect e{"", "", {{"a", R"({"x":1})"}, {"b", "{}"}}};
  e.warnings = {"missing invoke close tag before the next invoke"};
  expect_parse(text, chat(), e);
}

TEST(ParseMalformed, MissingInvokeCloseBeforeBlockEnd) {
  const std::string text = "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n" + P("x", "true", "1") +
                           "</｜DSML｜tool_calls>tail";
  Expect e{"", "tail", {{"a", R"({"x":"1"})"}}};
  e.warnings = {"missing invoke close tag before the block end"};
  expect_parse(text, chat(), e);
}

TEST(ParseMalformed, DoubledBlockOpen) {
  const std::string text = "<｜DSML｜tool_calls>\n<｜DSML｜tool_calls>\n" + I("a", "") + "</｜DSML｜tool_calls>";
  Expect e{"", "", {{"a", "{}"}}};
  e.warnings = {"doubled tool_calls open tag"};
  expect_parse(text, chat(), e);
}

TEST(ParseMalformed, UnterminatedBlockInsideStringValue) {
  const std::string text = "hi\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"w\">\n"
                           "<｜DSML｜parameter name=\"p\" string=\"true\">abc</｜DSML｜par";
  Expect e{"", "hi", {{"w", R"({"p":"abc</｜DSML｜par"})"}}};
  e.unterminated_block = true;
  e.warnings = {"ended inside a tool-call block"};
  expect_parse(text, chat(), e);
}

TEST(ParseMalformed, UnterminatedBlockInsideJsonValue) {
  const std::string text = "<｜DSML｜tool_calls><｜DSML｜invoke name=\"w\"><｜DSML｜parameter name=\"p\" "
                           "string=\"false\">{\"a\": [1, 2";
  Expect e{"", "", {{"w", R"({"p":"{\"a\": [1, 2"})"}}};
  e.unterminated_block = true;
  e.warnings = {"not valid JSON", "ended inside a tool-call block"};
  expect_parse(text, chat(), e);
}

TEST(ParseMalformed, UnterminatedBlockBeforeAnyCallIsContent) {
  const std::string text = "hi\n\n<｜DSML｜tool_calls>\n<｜DSML｜inv";
  Expect e{"", text};
  e.unterminated_block = true;
  e.warnings = {"ended inside a tool-call block"};
  expect_parse(text, chat(), e);
}

TEST(ParseMalformed, UnterminatedAfterCompleteCallKeepsCallAndCutTag) {
  const std::string text = "<｜DSML｜tool_calls>\n" + I("a", P("k", "false", "2")) + "</｜DSML｜tool_ca";
  Expect e{"", "</｜DSML｜tool_ca", {{"a", R"({"k":2})"}}};
  e.unterminated_block = true;
  e.warnings = {"ended inside a tool-call block"};
  expect_parse(text, chat(), e);
}

TEST(ParseMalformed, UnknownAttributesAreIgnored) {
  const std::string text = "<｜DSML｜tool_calls><｜DSML｜invoke name=\"f\" id=\"3\">"
                           "<｜DSML｜parameter name=\"a\" string=\"true\" type=\"int\">5</｜DSML｜parameter>"
                           "</｜DSML｜invoke></｜DSML｜tool_calls>";
  Expect e{"", "", {{"f", R"({"a":"5"})"}}};
  e.warnings = {"unexpected invoke attribute id=\"3\"", "unexpected parameter attribute type=\"int\""};
  expect_parse(text, chat(), e);
}

TEST(ParseMalformed, UnexpectedStringAttributeValueReadsAString) {
  const std::string text = "<｜DSML｜tool_calls>" + I("f", P("a", "yes", "5")) + "</｜DSML｜tool_calls>";
  Expect e{"", "", {{"f", R"({"a":"5"})"}}};
  e.warnings = {"string=\"yes\""};
  expect_parse(text, chat(), e);
}

TEST(ParseMalformed, InvalidJsonValueFallsBackToString) {
  const std::string text = "<｜DSML｜tool_calls>" + I("f", P("a", "false", "hello world") +
                                                         P("b", "false", "") + P("c", "false", "NaN")) +
                           "</｜DSML｜tool_calls>";
  Expect e{"", "", {{"f", R"({"a":"hello world","b":"","c":"NaN"})"}}};
  e.warnings = {"\"a\" has string=\"false\" but is not valid JSON", "\"b\"", "\"c\""};
  expect_parse(text, chat(), e);
}

TEST(ParseMalformed, MissingStringAttribute) {
  const std::string plain = "<｜DSML｜tool_calls><｜DSML｜invoke name=\"f\">"
                            "<｜DSML｜parameter name=\"a\"> raw</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>";
  Expect e{"", "", {{"f", R"({"a":" raw"})"}}};
  e.warnings = {"without a string attribute: read as a string"};
  expect_parse(plain, chat(), e);

  const std::string nested = "<｜DSML｜tool_calls><｜DSML｜invoke name=\"f\">\n"
                             "<｜DSML｜parameter name=\"obj\">\n" + P("x", "true", "1") + P("y", "false", "2") +
                             "</｜DSML｜parameter>\n" + P("z", "true", "3") + "</｜DSML｜invoke></｜DSML｜tool_calls>";
  Expect n{"", "", {{"f", R"({"obj":{"x":"1","y":2},"z":"3"})"}}};
  n.warnings = {"holds nested parameters: read as an object"};
  expect_parse(nested, chat(), n);
}

TEST(ParseMalformed, GarbageBeforeAnyCallPassesThroughVerbatim) {
  const std::string text = "Use the <tool_calls> element\n\n<｜DSML｜tool_calls> like this.";
  Expect e{"", text};
  e.warnings = {"passed through as content", "passed through as content"};
  expect_parse(text, chat(), e);
}

TEST(ParseMalformed, EmptyBlockPassesThroughVerbatim) {
  const std::string text = "A\n\n<｜DSML｜tool_calls>\n</｜DSML｜tool_calls> B";
  Expect e{"", text};
  e.warnings = {"without calls passed through"};
  expect_parse(text, chat(), e);
}

TEST(ParseMalformed, GarbageAfterACallKeepsTheCall) {
  const std::string text = "<｜DSML｜tool_calls>\n" + I("a", "") + "oops </｜DSML｜tool_calls>";
  Expect e{"", "oops </｜DSML｜tool_calls>", {{"a", "{}"}}};
  e.warnings = {"calls so far kept"};
  expect_parse(text, chat(), e);
}

TEST(ParseMalformed, GarbageInsideAnInvoke) {
  const std::string text = "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n" + P("k", "true", "v") +
                           "stray text</｜DSML｜invoke></｜DSML｜tool_calls>";
  Expect e{"", "stray text</｜DSML｜invoke></｜DSML｜tool_calls>", {{"a", R"({"k":"v"})"}}};
  e.warnings = {"text between parameters"};
  expect_parse(text, chat(), e);
}

TEST(ParseMalformed, InvokeWithoutNameAndParameterWithoutName) {
  const std::string no_invoke_name = "<｜DSML｜tool_calls><｜DSML｜invoke id=\"1\"></｜DSML｜invoke></｜DSML｜tool_calls>";
  Expect e{"", no_invoke_name};
  e.warnings = {"unexpected invoke attribute id", "invoke without a name"};
  expect_parse(no_invoke_name, chat(), e);

  const std::string no_param_name = "<｜DSML｜tool_calls><｜DSML｜invoke name=\"f\">"
                                    "<｜DSML｜parameter string=\"true\">v</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>";
  Expect p{"", "<｜DSML｜parameter string=\"true\">v</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>",
           {{"f", "{}"}}};
  p.warnings = {"parameter without a name"};
  expect_parse(no_param_name, chat(), p);
}

TEST(ParseMalformed, MalformedTagSyntax) {
  const std::string text = "<｜DSML｜tool_calls><｜DSML｜invoke name=f>x";
  Expect e{"", text};
  e.warnings = {"malformed invoke tag"};
  expect_parse(text, chat(), e);
}

TEST(ParseMalformed, MixedSpellingInsideABlock) {
  const std::string text = "<｜DSML｜tool_calls><invoke name=\"f\"></invoke></｜DSML｜tool_calls>";
  Expect e{"", text};
  e.warnings = {"unexpected tag between calls"};
  expect_parse(text, chat(), e);
}

TEST(ParseMalformed, DuplicateParametersAreBothKept) {
  const std::string text = "<｜DSML｜tool_calls>" + I("f", P("a", "false", "1") + P("a", "false", "2")) +
                           "</｜DSML｜tool_calls>";
  expect_parse(text, chat(), {"", "", {{"f", R"({"a":1,"a":2})"}}});
}

TEST(ParserApi, FinishTwiceAndFeedAfterFinishAreNoOps) {
  OutputParser p(thinking());
  std::vector<ParseEvent> ev;
  p.feed("a</think>b", ev);
  EXPECT_FALSE(p.inside_tool_block());
  p.feed("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">", ev);
  EXPECT_TRUE(p.inside_tool_block());
  EXPECT_EQ(p.closed_tool_blocks(), 0);
  p.finish(ev);
  const size_t n = ev.size();
  p.finish(ev);
  p.feed("more", ev);
  EXPECT_EQ(ev.size(), n);
  EXPECT_EQ(p.result().content, "b");
  EXPECT_TRUE(p.result().unterminated_tool_block);
  ASSERT_EQ(p.result().tool_calls.size(), 1u);
  EXPECT_EQ(p.result().tool_calls[0].arguments, "{}");
}

TEST(ParserApi, EventsStreamLive) {
  // Deltas come out as soon as they are decided: the call begins when its invoke tag is complete
  // and a string value streams before its close tag arrives.
  OutputParser p(chat());
  std::vector<ParseEvent> ev;
  p.feed("Hi\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"s\" string=\"true\">ab", ev);
  const std::vector<ParseEvent> want = {
      {ParseEventKind::content_delta, "Hi", -1},
      {ParseEventKind::tool_call_begin, "f", 0},
      {ParseEventKind::tool_args_delta, "{\"s\":\"ab", 0}};
  EXPECT_EQ(ev, want);
  ev.clear();
  p.feed("c&lt;</｜DSML｜param", ev);
  EXPECT_EQ(ev, (std::vector<ParseEvent>{{ParseEventKind::tool_args_delta, "c&lt;", 0}}));
  ev.clear();
  p.feed("eter>\n</｜DSML｜invoke>", ev);
  EXPECT_EQ(ev, (std::vector<ParseEvent>{{ParseEventKind::tool_args_delta, "\"}", 0},
                                         {ParseEventKind::tool_call_end, "", 0}}));
  EXPECT_EQ(p.closed_tool_blocks(), 0);
  p.feed("\n</｜DSML｜tool_calls>", ev);
  EXPECT_EQ(p.closed_tool_blocks(), 1);
  EXPECT_FALSE(p.inside_tool_block());
}

}  // namespace
}  // namespace ds4::chat
