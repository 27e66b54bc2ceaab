#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "common/error.h"

namespace ds4::tok {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(std::string_view text) {
  static const PreTokenizer pre;
  Pieces out;
  for (std::string_view p : pre.split(text)) out.emplace_back(p);
  return out;
}

// Expected pieces below are worked out by hand from kSplitPatterns (sequence semantics, "Isolated").
TEST(PreTokenizer, WordsPunctuationAndSpaces) {
  EXPECT_EQ(split("Hello, world!"), (Pieces{"Hello", ",", " world", "!"}));
  EXPECT_EQ(split("a  b"), (Pieces{"a", " ", " b"}));  // \s+(?!\S) leaves the last space to the word
  EXPECT_EQ(split("(abc def"), (Pieces{"(abc", " def"}));  // punctuation + ASCII letters
  EXPECT_EQ(split("don't"), (Pieces{"don", "'t"}));
  EXPECT_EQ(split("a ->\nb"), (Pieces{"a", " ->\n", "b"}));  // punctuation keeps its trailing newline
  EXPECT_EQ(split(""), (Pieces{}));
}

TEST(PreTokenizer, DigitsAreCutIntoGroupsOfThreeFirst) {
  EXPECT_EQ(split("123456789 42 007"), (Pieces{"123", "456", "789", " ", "42", " ", "007"}));
  EXPECT_EQ(split("1234"), (Pieces{"123", "4"}));
  EXPECT_EQ(split("ab12cd"), (Pieces{"ab", "12", "cd"}));
  // Step 3 runs on the gap "  " alone, so its lookahead sees the end of the piece, not the digit.
  EXPECT_EQ(split("  123"), (Pieces{"  ", "123"}));
  // Arabic-Indic digits are \p{N} too.
  EXPECT_EQ(split("\xD9\xA1\xD9\xA2\xD9\xA3\xD9\xA4"), (Pieces{"\xD9\xA1\xD9\xA2\xD9\xA3", "\xD9\xA4"}));
}

TEST(PreTokenizer, NewlinesAndWhitespaceRuns) {
  EXPECT_EQ(split("x\n\n  y"), (Pieces{"x", "\n\n", " ", " y"}));
  EXPECT_EQ(split("x\r\n\r\ny"), (Pieces{"x", "\r\n\r\n", "y"}));
}

TEST(PreTokenizer, CjkRunsAreIsolatedBeforeTheWordPattern) {
  EXPECT_EQ(split("\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C" "abc"),  // 你好世界abc
            (Pieces{"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C", "abc"}));
}

TEST(PreTokenizer, CombiningMarksStayWithTheirLetters) {
  EXPECT_EQ(split("e\xCC\x81t\xC3\xA9 x"), (Pieces{"e\xCC\x81t\xC3\xA9", " x"}));
}

TEST(PreTokenizer, WhiteSpaceIsTheEcmaScriptSet) {
  // U+FEFF is JS white space: "  \uFEFF" is one run. (Checked against the npm tokenizer.)
  EXPECT_EQ(split("a\xEF\xBB\xBF" "b  \xEF\xBB\xBF x"), (Pieces{"a", "\xEF\xBB\xBF" "b", "  \xEF\xBB\xBF", " x"}));
  // U+0085 is not JS white space (PCRE2's \s would say it is): it stays a lone unmatched piece.
  EXPECT_EQ(split("x\xC2\x85y \xC2\x85 z"), (Pieces{"x", "\xC2\x85y", " ", "\xC2\x85", " z"}));
}

TEST(PreTokenizer, EveryInvalidByteIsItsOwnPiece) {
  EXPECT_EQ(split("ab\xFF" "cd"), (Pieces{"ab", "\xFF", "cd"}));
  EXPECT_EQ(split("a\xE1\x80" "b"), (Pieces{"a", "\xE1", "\x80", "b"}));
  EXPECT_EQ(split("\xF0\x9F\x98"), (Pieces{"\xF0", "\x9F", "\x98"}));  // truncated emoji at the end
}

TEST(PreTokenizer, PiecesAreNonEmptyAndConcatenateToAnyInput) {
  std::mt19937 rng(1234);
  const std::string alphabet[] = {"a", "Z", " ", "\n", "\r", "\t", "1", "!", "'", "\xC3\xA9", "\xE4\xBD\xA0",
                                  "\xCC\x81", "\xF0\x9F\x98\x80", "\xE2\x80\xA8", "\xFF", "\x80", "\0"};
  for (int iter = 0; iter < 300; ++iter) {
    std::string text;
    const int n = static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) text += alphabet[rng() % std::size(alphabet)];
    std::string joined;
    for (const std::string& p : split(text)) {
      EXPECT_FALSE(p.empty());
      joined += p;
    }
    EXPECT_EQ(joined, text);
  }
}

TEST(PreTokenizer, PatternsCompileWithJit) {
  const PreTokenizer pre;
  EXPECT_TRUE(pre.jit_enabled());
}

TEST(ToPcre2Pattern, RewritesBackslashSOutsideClassesOnly) {
  const std::string ws = "[" + std::string(kJsWhiteSpaceClass) + "]";
  const std::string nws = "[^" + std::string(kJsWhiteSpaceClass) + "]";
  EXPECT_EQ(to_pcre2_pattern(R"(\s+(?!\S))"), ws + "+(?!" + nws + ")");
  EXPECT_EQ(to_pcre2_pattern(R"(\\s)"), R"(\\s)");  // escaped backslash, then a literal 's'
  EXPECT_EQ(to_pcre2_pattern(R"([^a\]]\S)"), R"([^a\]])" + nws);  // the class ends at the unescaped ']'
}

TEST(ToPcre2Pattern, RejectsBackslashSInsideAClass) {
  EXPECT_THROW(to_pcre2_pattern(R"([a\s])"), Error);
}

}  // namespace
}  // namespace ds4::tok
