#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace ds4::tok {
namespace {

const std::string kFFFD = "\xEF\xBF\xBD";

TEST(Utf8, ScanClassifiesWellFormedIllFormedAndTruncated) {
  using K = Utf8Scan::Kind;
  auto scan = [](std::string_view s) { return utf8_scan(s, 0); };
  EXPECT_EQ(scan("A").kind, K::kValid);
  EXPECT_EQ(scan("\xC3\xA9").codepoint, 0xE9u);
  EXPECT_EQ(scan("\xE4\xBD\xA0").codepoint, 0x4F60u);
  EXPECT_EQ(scan("\xF0\x9F\x98\x80").codepoint, 0x1F600u);
  EXPECT_EQ(scan("\xF0\x9F\x98\x80").length, 4u);
  // Ill-formed: maximal subparts (Unicode §3.9, Table 3-7).
  EXPECT_EQ(scan("\x80").kind, K::kInvalid);
  EXPECT_EQ(scan("\xC0\xAF").length, 1u);          // C0 never starts a sequence
  EXPECT_EQ(scan("\xE0\x80\x80").length, 1u);      // overlong: E0 needs A0..BF next
  EXPECT_EQ(scan("\xED\xA0\x80").length, 1u);      // surrogate: ED needs 80..9F next
  EXPECT_EQ(scan("\xF4\x90\x80\x80").length, 1u);  // above U+10FFFF
  EXPECT_EQ(scan("\xF5\x80").length, 1u);
  EXPECT_EQ(scan("\xE1\x80" "A").kind, K::kInvalid);
  EXPECT_EQ(scan("\xE1\x80" "A").length, 2u);
  EXPECT_EQ(scan("\xF1\x80\x80").kind, K::kTruncated);
  EXPECT_EQ(scan("\xF1\x80\x80").length, 3u);
}

TEST(Utf8, SanitizeFollowsTheUnicodeStandardExample) {
  // Unicode 15 §3.9, "U+FFFD Substitution of Maximal Subparts", Table 3-8 example.
  const std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  EXPECT_EQ(utf8_sanitize(in), "a" + kFFFD + kFFFD + kFFFD + "b" + kFFFD + "c" + kFFFD + kFFFD + "d");
  EXPECT_EQ(utf8_sanitize("\xED\xA0\x80"), kFFFD + kFFFD + kFFFD);
  EXPECT_EQ(utf8_sanitize("ok \xE4\xBD"), "ok " + kFFFD);  // truncated tail: one U+FFFD
  EXPECT_EQ(utf8_sanitize("caf\xC3\xA9 \xF0\x9F\x98\x80"), "caf\xC3\xA9 \xF0\x9F\x98\x80");
}

TEST(Utf8, ValidUntilFindsTheFirstBadByteAfterLongAsciiRuns) {
  std::string s(1000, 'x');
  EXPECT_TRUE(utf8_is_valid(s));
  s += "\xC3\xA9";
  EXPECT_TRUE(utf8_is_valid(s));
  s += std::string(17, 'y') + "\xFF" + "z";
  EXPECT_EQ(utf8_valid_until(s), 1000u + 2u + 17u);
  EXPECT_EQ(utf8_valid_until(s, 1019), 1019u);
  EXPECT_EQ(utf8_valid_until(s, 1020), s.size());
  EXPECT_TRUE(utf8_is_valid(std::string(5, '\0')));
}

TEST(Utf8, AppendEncodesEveryLength) {
  std::string s;
  for (uint32_t cp : {0x24u, 0xA2u, 0x20ACu, 0x10348u}) utf8_append(s, cp);
  EXPECT_EQ(s, "\x24\xC2\xA2\xE2\x82\xAC\xF0\x90\x8D\x88");
}

}  // namespace
}  // namespace ds4::tok
