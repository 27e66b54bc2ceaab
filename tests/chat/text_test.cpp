// Byte/text helpers: UTF-8 sanitizing (Unicode's maximal-subpart replacement, independent of
// chunking), JSON string escaping and Python json.dumps formatting (checked against outputs of
// CPython's json.dumps / repr written out by hand), JSON minification, DSML escaping.
#include "chat/dsml.h"
#include "chat/json_text.h"
#include "chat/text_util.h"

#include "common/error.h"

#include <gtest/gtest.h>

#include <limits>

namespace ds4::chat {
namespace {

using ojson = nlohmann::ordered_json;
const std::string R(kReplacementChar);

TEST(Utf8, ValidTextPassesUnchanged) {
  const std::string s = "ascii é 中 😀 \x7f \xEF\xBF\xBD";
  EXPECT_EQ(sanitize_utf8(s), s);
  EXPECT_TRUE(is_valid_utf8(s));
}

TEST(Utf8, MaximalSubpartsBecomeOneReplacementEach) {
  // Unicode 15 Table 3-8 example: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64.
  EXPECT_EQ(sanitize_utf8("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + R + R + R + "b" + R + "c" + R + R + "d");
  EXPECT_EQ(sanitize_utf8("\xC0\xAF"), R + R);          // overlong lead bytes are never valid
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), R + R + R);  // surrogates
  EXPECT_EQ(sanitize_utf8("\xF4\x90\x80\x80"), R + R + R + R);  // above U+10FFFF
  EXPECT_EQ(sanitize_utf8("\xE4\xB8"), R);              // truncated at the end
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98"), R);
  EXPECT_FALSE(is_valid_utf8("\xff"));
}

TEST(Utf8, StreamingHoldsIncompleteCharactersAndIgnoresChunking) {
  const std::string text = "a\xE4\xB8\xAD\xF0\x9F\x98\x80\xE4\xB8" "b\xF0\x9F\x98";
  const std::string whole = sanitize_utf8(text);
  EXPECT_EQ(whole, "a中😀" + R + "b" + R);
  for (size_t i = 0; i <= text.size(); ++i) {
    for (size_t j = i; j <= text.size(); ++j) {
      Utf8Sanitizer s;
      std::string out, piece;
      for (auto [from, to] : {std::pair{size_t{0}, i}, std::pair{i, j}, std::pair{j, text.size()}}) {
        piece.clear();
        s.feed(std::string_view(text).substr(from, to - from), piece);
        ASSERT_TRUE(is_valid_utf8(piece)) << i << "," << j;
        out += piece;
      }
      s.finish(out);
      ASSERT_EQ(out, whole) << "split " << i << "," << j;
    }
  }
}

TEST(JsonEscape, PythonRules) {
  std::string out;
  append_json_string(out, "q\" b\\ \b\f\n\r\t \x01\x1f\x7f é 😀 /");
  EXPECT_EQ(out, "\"q\\\" b\\\\ \\b\\f\\n\\r\\t \\u0001\\u001f\x7f é 😀 /\"");
}

TEST(PythonJson, FloatReprMatchesCPython) {
  // Values and the strings CPython's repr()/json.dumps gives for them.
  const std::pair<double, const char*> cases[] = {
      {0.0, "0.0"},       {-0.0, "-0.0"},         {1.0, "1.0"},
      {1.5, "1.5"},       {0.1, "0.1"},           {-2.5e-3, "-0.0025"},
      {1e-4, "0.0001"},   {1e-5, "1e-05"},        {1.5e-5, "1.5e-05"},
      {1e15, "1000000000000000.0"}, {1e16, "1e+16"}, {1.2345678901234567e16, "1.2345678901234568e+16"},
      {123456789.125, "123456789.125"}, {1e300, "1e+300"}, {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"}, {0.30000000000000004, "0.30000000000000004"},
      {100.0, "100.0"},   {2.5e-7, "2.5e-07"},
  };
  for (const auto& [v, want] : cases) EXPECT_EQ(python_float_repr(v), want) << v;
  EXPECT_EQ(python_float_repr(std::numeric_limits<double>::infinity()), "Infinity");
  EXPECT_EQ(python_float_repr(-std::numeric_limits<double>::infinity()), "-Infinity");
  EXPECT_EQ(python_float_repr(std::numeric_limits<double>::quiet_NaN()), "NaN");
}

TEST(PythonJson, DumpsLayoutAndOrder) {
  const ojson v = ojson::parse(
      R"({"z": [1, -2, 3.0, true, false, null, [], {}], "a": {"é": "x\ny"}, "big": 18446744073709551615, "neg": -9223372036854775808})");
  EXPECT_EQ(python_json_dumps(v),
            "{\"z\": [1, -2, 3.0, true, false, null, [], {}], \"a\": {\"é\": \"x\\ny\"}, "
            "\"big\": 18446744073709551615, \"neg\": -9223372036854775808}");
  EXPECT_THROW(python_json_dumps(ojson(std::string("\xC3"))), Error);
}

TEST(Minify, KeepsTokensRemovesWhitespace) {
  EXPECT_EQ(minify_json(" { \"a b\" : [ 1 , 2.50 , \"x  y\\\" \" ] ,\n\"c\":1E5 } "),
            "{\"a b\":[1,2.50,\"x  y\\\" \"],\"c\":1E5}");
  EXPECT_EQ(minify_json("123456789012345678901234567890"), "123456789012345678901234567890");
  EXPECT_EQ(minify_json("\"\\u00e9\""), "\"\\u00e9\"");
  EXPECT_FALSE(minify_json(""));
  EXPECT_FALSE(minify_json("{\"a\":}"));
  EXPECT_FALSE(minify_json("NaN"));
  EXPECT_FALSE(minify_json("1 2"));
  EXPECT_FALSE(minify_json("\"raw\ncontrol\""));
}

TEST(Dsml, StringValueEscapingIsReversible) {
  const std::string cases[] = {
      "", "plain & <b> &amp; &lt; &quot;", "</｜DSML｜parameter>", "x</｜DSML｜parameter></｜DSML｜parameter>",
      "&lt;/｜DSML｜parameter>", "&amp;lt;/｜DSML｜parameter>", "&amp;amp;amp;lt;/｜DSML｜parameter>",
      "&&lt;/｜DSML｜parameter>", "&amp&lt;/｜DSML｜parameter>", "<</｜DSML｜parameter>", "</｜DSML｜parameter",
      "</DSML｜parameter>", "&lt;/parameter>"};
  for (const std::string& s : cases) {
    std::string esc;
    append_dsml_string_value(esc, s);
    EXPECT_EQ(esc.find("</｜DSML｜parameter>"), std::string::npos) << s;
    EXPECT_EQ(dsml_string_value_unescape(esc, DsmlSpelling::full), s) << esc;
  }
  std::string esc;
  append_dsml_string_value(esc, "a</｜DSML｜parameter>b&lt;/｜DSML｜parameter>");
  EXPECT_EQ(esc, "a&lt;/｜DSML｜parameter>b&amp;lt;/｜DSML｜parameter>");
  esc.clear();
  append_dsml_string_value(esc, "no tag & <here>");
  EXPECT_EQ(esc, "no tag & <here>");  // identical to the official raw form
  EXPECT_EQ(dsml_string_value_unescape("&lt;/parameter>", DsmlSpelling::plain), "</parameter>");
}

TEST(Dsml, JsonValueAndAttributeEscaping) {
  std::string out;
  append_dsml_json_value(out, "[\"</｜DSML｜parameter>\", \"<x>\"]");
  EXPECT_EQ(out, "[\"\\u003c/｜DSML｜parameter>\", \"<x>\"]");
  out.clear();
  append_dsml_attr_escaped(out, "a&b<c>\"d'");
  EXPECT_EQ(out, "a&amp;b&lt;c&gt;&quot;d'");
  EXPECT_EQ(dsml_attr_unescape(out), "a&b<c>\"d'");
  EXPECT_EQ(dsml_attr_unescape("&apos;&amp;amp;&bogus;"), "'&amp;&bogus;");
  EXPECT_EQ(dsml_open(DsmlSpelling::missing_first_bar, "invoke"), "<DSML｜invoke");
  EXPECT_EQ(dsml_close(DsmlSpelling::plain, "tool_calls"), "</tool_calls>");
}

TEST(Dsml, EscapedCloseMatcher) {
  const std::string tail = "/｜DSML｜parameter>";
  EXPECT_EQ(match_escaped_close("&lt;/｜DSML｜parameter>x", tail).status, EscapeMatch::full);
  EXPECT_EQ(match_escaped_close("&lt;/｜DSML｜parameter>x", tail).length, 4 + tail.size());
  EXPECT_EQ(match_escaped_close("&amp;amp;lt;/｜DSML｜parameter>", tail).amps, 2u);
  EXPECT_EQ(match_escaped_close("&am", tail).status, EscapeMatch::partial);
  EXPECT_EQ(match_escaped_close("&amp;lt;/｜DS", tail).status, EscapeMatch::partial);
  EXPECT_EQ(match_escaped_close("&amp;x", tail).status, EscapeMatch::none);
  EXPECT_EQ(match_escaped_close("&lt;b>", tail).status, EscapeMatch::none);
  EXPECT_EQ(match_escaped_close("x", tail).status, EscapeMatch::none);
}

}  // namespace
}  // namespace ds4::chat
