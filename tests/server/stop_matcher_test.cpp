#include "server/stop_matcher.h"

#include <gtest/gtest.h>

namespace ds4::server {
namespace {

struct Outcome {
  std::string text;
  std::string matched;
};

// Feeds `chunks` and returns the released text and the matched stop string.
Outcome run(const std::vector<std::string>& stops, const std::vector<std::string>& chunks) {
  StopMatcher m(stops);
  Outcome o;
  for (const auto& c : chunks) {
    if (m.feed(c, o.text)) {
      o.matched = m.matched();
      return o;
    }
  }
  m.finish(o.text);
  return o;
}

TEST(StopMatcher, CutsBeforeTheStopString) {
  const auto o = run({"END"}, {"hello E", "ND tail"});
  EXPECT_EQ(o.text, "hello ");
  EXPECT_EQ(o.matched, "END");
}

TEST(StopMatcher, NoMatchReleasesEverythingAtFinish) {
  const auto o = run({"END"}, {"hello E", "N"});
  EXPECT_EQ(o.text, "hello EN");
  EXPECT_EQ(o.matched, "");
}

TEST(StopMatcher, HoldsBackOnlyAPossibleStart) {
  StopMatcher m({"abc"});
  std::string out;
  EXPECT_FALSE(m.feed("xxab", out));
  EXPECT_EQ(out, "xx");  // "ab" could still become "abc"
  EXPECT_FALSE(m.feed("d", out));
  EXPECT_EQ(out, "xxabd");
}

TEST(StopMatcher, FirstCompletedStringWins) {
  // "bc" completes at offset 3, "abcd" only at 4: a stream would stop at "bc".
  EXPECT_EQ(run({"abcd", "bc"}, {"xabcd"}).text, "xa");
  EXPECT_EQ(run({"abcd", "bc"}, {"xabcd"}).matched, "bc");
  // Same end offset: the longer (earlier) one.
  EXPECT_EQ(run({"bc", "abc"}, {"xabc"}).matched, "abc");
  EXPECT_EQ(run({"bc", "abc"}, {"xabc"}).text, "x");
}

TEST(StopMatcher, EmptyStopStringsAreIgnored) {
  const auto o = run({"", "zz"}, {"abc"});
  EXPECT_EQ(o.text, "abc");
  EXPECT_EQ(o.matched, "");
}

// failure-modes item 5: every split of the text gives the same result as the whole text.
TEST(StopMatcher, IndependentOfChunking) {
  const std::vector<std::string> stops = {"</s>", "\n\nUser:", "é!"};
  const std::vector<std::string> texts = {"Hi there</s>more", "line\n\nUser: x", "abc</",
                                          "café! ok", "no stop at all \n\nUse"};
  for (const auto& text : texts) {
    const Outcome whole = run(stops, {text});
    for (size_t a = 0; a <= text.size(); ++a) {
      for (size_t b = a; b <= text.size(); ++b) {
        const Outcome split = run(stops, {text.substr(0, a), text.substr(a, b - a), text.substr(b)});
        ASSERT_EQ(split.text, whole.text) << text << " split at " << a << "," << b;
        ASSERT_EQ(split.matched, whole.matched) << text;
      }
    }
  }
  EXPECT_EQ(run(stops, {"café! ok"}).text, "caf");
}

}  // namespace
}  // namespace ds4::server
