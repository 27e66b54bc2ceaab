#include "tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <random>

#include "common/error.h"
#include "toy_vocab.h"

namespace ds4::tok {
namespace {

using namespace ds4::tok::testing;
using Ids = std::vector<int32_t>;

Ids merge(const BpeModel& m, std::string_view piece) {
  Ids out;
  m.encode(piece, out);
  return out;
}

class Bpe : public ::testing::Test {
 protected:
  Vocab v = toy_vocab();
  BpeModel model{v.tokens, v.merges};
};

TEST_F(Bpe, ResolvesByteTokensAndMerges) {
  EXPECT_EQ(model.byte_token('a'), 'a');
  EXPECT_EQ(model.size(), kToyMerges.size());
  const BpeModel::Merge* m = model.find('h', 'e');
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->rank, 0);
  EXPECT_EQ(m->result, kFirstMerge);
  EXPECT_EQ(model.find('e', 'h'), nullptr);
}

// Expected ids worked out by hand from the merge list in toy_vocab.h.
TEST_F(Bpe, MergesInRankOrder) {
  EXPECT_EQ(merge(model, "hello"), (Ids{kHello}));                    // he, ll, hell, hello
  EXPECT_EQ(merge(model, " world"), (Ids{kSpaceWor, 'l', 'd'}));      // Ġw (4), or (5), Ġwor (6)
  EXPECT_EQ(merge(model, "abc"), (Ids{'a', kBC}));                    // b c (rank 8) beats a b (rank 9)
  EXPECT_EQ(merge(model, "abd"), (Ids{kAB, 'd'}));
  EXPECT_EQ(merge(model, "x"), (Ids{'x'}));
}

TEST_F(Bpe, EqualRanksMergeLeftmostFirst) {
  EXPECT_EQ(merge(model, "aaa"), (Ids{kAA, 'a'}));       // not a, aa
  EXPECT_EQ(merge(model, "aaaa"), (Ids{kAAAA}));         // aa aa, then aaaa
  EXPECT_EQ(merge(model, "aaaaa"), (Ids{kAAAA, 'a'}));
  EXPECT_EQ(merge(model, "aaaaaa"), (Ids{kAAAA, kAA}));
}

TEST_F(Bpe, SmallAndHeapLoopsAgree) {
  std::mt19937 rng(7);
  const char alphabet[] = "aabcheloorw d";
  for (int iter = 0; iter < 2000; ++iter) {
    std::string s;
    const size_t n = 1 + rng() % (iter < 1900 ? 40 : 400);
    for (size_t i = 0; i < n; ++i) s += alphabet[rng() % (sizeof alphabet - 1)];
    Ids a, b;
    model.merge_small(s, a);
    model.merge_heap(s, b);
    ASSERT_EQ(a, b) << s;
  }
}

TEST(BpeErrors, MissingByteTokenIsReported) {
  Vocab v = toy_vocab();
  v.tokens['\n'] = "newline";  // byte 0x0A's token is "Ċ"
  try {
    BpeModel m(v.tokens, v.merges);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("byte 0x0A"), std::string::npos) << e.what();
  }
}

TEST(BpeErrors, MalformedOrUnknownMergesAreReportedWithTheirRank) {
  for (const char* bad : {"ab", " a", "a ", "a  b", "a b c"}) {
    Vocab v = toy_vocab();
    v.merges.push_back(bad);
    EXPECT_THROW(BpeModel(v.tokens, v.merges), Error) << bad;
  }
  for (const char* bad : {"zz q", "q zz", "x y"}) {  // left / right / merged string not a token
    Vocab v = toy_vocab();
    v.merges.push_back(bad);
    try {
      BpeModel m(v.tokens, v.merges);
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("merge 11"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ds4::tok
