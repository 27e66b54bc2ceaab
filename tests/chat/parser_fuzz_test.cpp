// Randomized chunking check: texts assembled from DSML fragments, partial markers, escapes,
// multi-byte and invalid UTF-8 (fixed seed, so reproducible) must parse identically however they
// are split, and every stream must satisfy the event invariants.
#include "chat/output_parser.h"

#include "parser_support.h"

#include <gtest/gtest.h>

#include <random>

namespace ds4::chat {
namespace {

std::string random_text(std::mt19937& rng) {
  static const std::vector<std::string> kPieces = {
      "<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>", "<｜DSML｜invoke name=\"f\">",
      "<｜DSML｜invoke name=\"g\" x=\"1\">", "</｜DSML｜invoke>", "<｜DSML｜parameter name=\"a\" string=\"true\">",
      "<｜DSML｜parameter name=\"b\" string=\"false\">", "<｜DSML｜parameter name=\"c\">",
      "</｜DSML｜parameter>", "&lt;/｜DSML｜parameter>", "&amp;lt;/｜DSML｜parameter>", "&amp;", "&",
      "<tool_calls>", "<invoke name=\"p\">", "<parameter name=\"q\" string=\"false\">", "</parameter>",
      "</invoke>", "</tool_calls>", "<DSML｜tool_calls>", "</think>", "<think>", "\n\n", " ", "\n",
      "text", "{\"k\": [1, 2]}", "42", "null", "中", "😀", "é", "\xff", "\xe4\xb8", "<", "</", "<｜DSML｜",
      "\"", "\\", "=", ">"};
  std::uniform_int_distribution<size_t> pick(0, kPieces.size() - 1);
  std::uniform_int_distribution<int> len(1, 24);
  std::string s;
  const int n = len(rng);
  for (int i = 0; i < n; ++i) s += kPieces[pick(rng)];
  return s;
}

TEST(ParseFuzz, RandomTextsAreSplitInvariant) {
  std::mt19937 rng(20240607);
  for (int iter = 0; iter < 400; ++iter) {
    const std::string text = random_text(rng);
    for (bool thinking : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "iter " << iter << " thinking " << thinking << " text: " << text);
      test::check_split_invariance(text, ParseOptions{thinking, true}, 0);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

}  // namespace
}  // namespace ds4::chat
