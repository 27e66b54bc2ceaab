#include "tokenizer/byte_map.h"

#include <gtest/gtest.h>

#include <set>

namespace ds4::tok {
namespace {

TEST(ByteMap, PrintableBytesMapToThemselvesAndTheRestToU0100Upwards) {
  int identity = 0;
  for (int b = 0; b < 256; ++b) identity += byte_to_codepoint(static_cast<uint8_t>(b)) == static_cast<uint32_t>(b);
  EXPECT_EQ(identity, 94 + 12 + 82);  // 33-126, 161-172, 174-255 (spec §6.2)
  // Hand-counted positions among the 68 remapped bytes (0-32, 127-160, 173 in increasing order).
  EXPECT_EQ(byte_to_codepoint(0), 0x100u);
  EXPECT_EQ(byte_to_codepoint('\n'), 0x10Au);
  EXPECT_EQ(byte_to_codepoint(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_to_codepoint(127), 0x121u);
  EXPECT_EQ(byte_to_codepoint(160), 0x142u);
  EXPECT_EQ(byte_to_codepoint(173), 0x143u);
  EXPECT_EQ(byte_to_codepoint('A'), static_cast<uint32_t>('A'));
  EXPECT_EQ(byte_to_codepoint(0xE9), 0xE9u);
}

TEST(ByteMap, IsABijectionWithItsInverse) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = byte_to_codepoint(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(codepoint_to_byte(cp), b);
  }
  EXPECT_EQ(codepoint_to_byte(0x144), -1);
  EXPECT_EQ(codepoint_to_byte(' '), -1);  // space itself is not a byte code point
  EXPECT_EQ(codepoint_to_byte(0xFF5C), -1);
}

TEST(ByteMap, EncodeAndDecodeRoundTripEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const std::string enc = byte_encode(all);
  EXPECT_EQ(enc.size(), 94u + 94u * 2u + 68u * 2u);  // ASCII identity bytes take 1 byte, all others 2
  EXPECT_EQ(byte_decode(enc), all);
  EXPECT_EQ(byte_encode(" hello\n"), "\xC4\xA0hello\xC4\x8A");  // Ġhello Ċ
  EXPECT_EQ(byte_decode("\xC4\xA0world"), " world");
}

TEST(ByteMap, DecodeRejectsStringsOutsideTheByteAlphabet) {
  EXPECT_EQ(byte_decode("<\uFF5CUser\uFF5C>"), std::nullopt);  // added token: not byte-encoded
  EXPECT_EQ(byte_decode("a b"), std::nullopt);                  // raw space is not a byte code point
  EXPECT_EQ(byte_decode("\xC4"), std::nullopt);                 // not UTF-8
  EXPECT_EQ(byte_decode(""), std::string());
}

}  // namespace
}  // namespace ds4::tok
