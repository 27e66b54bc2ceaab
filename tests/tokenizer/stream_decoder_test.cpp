#include "tokenizer/stream_decoder.h"

#include <gtest/gtest.h>

#include <random>

#include "common/error.h"
#include "tokenizer/utf8.h"
#include "toy_vocab.h"

namespace ds4::tok {
namespace {

using namespace ds4::tok::testing;
const std::string kFFFD = "\xEF\xBF\xBD";

const Tokenizer& toy() {
  static const Tokenizer t(toy_vocab());
  return t;
}

// Byte tokens have id == byte value in the toy vocabulary.
TEST(StreamDecoder, HoldsBackPartialCharacters) {
  StreamDecoder d(toy());
  EXPECT_EQ(d.push(kHello), "hello");
  EXPECT_EQ(d.push(0xE4), "");  // 你 = E4 BD A0
  EXPECT_EQ(d.pending_bytes(), 1u);
  EXPECT_EQ(d.push(0xBD), "");
  EXPECT_EQ(d.push(0xA0), "\xE4\xBD\xA0");
  EXPECT_EQ(d.pending_bytes(), 0u);
  EXPECT_EQ(d.finish(), "");
}

TEST(StreamDecoder, EmitsReplacementAsSoonAsASequenceIsDefinitelyInvalid) {
  StreamDecoder d(toy());
  EXPECT_EQ(d.push(0xFF), kFFFD);  // can never start a character
  EXPECT_EQ(d.push(0xE4), "");
  EXPECT_EQ(d.push('a'), kFFFD + "a");  // 'a' cannot continue E4
  EXPECT_EQ(d.push(0xF0), "");
  EXPECT_EQ(d.push(0x9F), "");
  EXPECT_EQ(d.push(kUser), kFFFD + std::string(kUserToken));  // '<' cannot continue F0 9F
}

TEST(StreamDecoder, FinishFlushesATruncatedTailAsOneReplacement) {
  StreamDecoder d(toy());
  EXPECT_EQ(d.push(0xF0), "");
  EXPECT_EQ(d.push(0x9F), "");
  EXPECT_EQ(d.push(0x98), "");
  EXPECT_EQ(d.finish(), kFFFD);
  EXPECT_EQ(d.pending_bytes(), 0u);
  EXPECT_EQ(d.push('x'), "x");  // usable again after finish
}

TEST(StreamDecoder, BadIdThrowsAndLeavesTheStreamUnchanged) {
  StreamDecoder d(toy());
  EXPECT_EQ(d.push(0xE4), "");
  EXPECT_THROW(d.push(toy().n_vocab()), Error);
  EXPECT_THROW(d.push(-1), Error);
  EXPECT_EQ(d.pending_bytes(), 1u);
  EXPECT_EQ(d.push(0xBD), "");
  EXPECT_EQ(d.push(0xA0), "\xE4\xBD\xA0");
}

TEST(StreamDecoder, OneIdAtATimeEqualsSanitizedDecodeOfAll) {
  std::mt19937 rng(5);
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<int32_t> ids(rng() % 30);
    // Mostly bytes >= 0x80 (lead and continuation bytes), some merges and specials.
    for (int32_t& id : ids) id = rng() % 3 ? static_cast<int32_t>(0x80 + rng() % 0x80) : static_cast<int32_t>(rng() % toy().n_vocab());
    StreamDecoder d(toy());
    std::string streamed;
    for (int32_t id : ids) {
      const std::string part = d.push(id);
      ASSERT_TRUE(utf8_is_valid(part));
      streamed += part;
    }
    streamed += d.finish();
    ASSERT_EQ(streamed, utf8_sanitize(toy().decode(ids)));
  }
}

}  // namespace
}  // namespace ds4::tok
