// ToolMemory (the exact-replay map), tool-block extraction and the renderer's dsml_raw hook.
#include <gtest/gtest.h>

#include "chat/render.h"
#include "common/error.h"
#include "server/tool_memory.h"

namespace ds4::server {
namespace {

using oj = nlohmann::ordered_json;

TEST(ToolMemory, WholeBlockOnly) {
  ToolMemory m;
  m.remember({{"call_a", "call_b"}, "\n\n<tool_calls>AB</tool_calls>"});
  m.remember({{"call_c"}, "\n<tool_calls>C</tool_calls>"});
  EXPECT_EQ(m.block_for({"call_a", "call_b"}), "\n\n<tool_calls>AB</tool_calls>");
  EXPECT_EQ(m.block_for({"call_c"}), "\n<tool_calls>C</tool_calls>");
  EXPECT_FALSE(m.block_for({"call_a"}));            // part of a block
  EXPECT_FALSE(m.block_for({"call_b", "call_a"}));  // another order
  EXPECT_FALSE(m.block_for({"call_a", "call_c"}));  // two blocks
  EXPECT_FALSE(m.block_for({"call_x"}));
  EXPECT_FALSE(m.block_for({}));
  EXPECT_EQ(m.ids(), 3u);
  // Bytes: each id counts its id and its block.
  const size_t ab = std::string("\n\n<tool_calls>AB</tool_calls>").size(), c = ab - 2;
  EXPECT_EQ(m.bytes(), 2 * (6 + ab) + 6 + c);
}

TEST(ToolMemory, LeastRecentlyUsedIdsGoFirst) {
  ToolMemory m({.max_ids = 3, .max_bytes = 1 << 20});
  m.remember({{"a1"}, "A"});
  m.remember({{"b1"}, "B"});
  m.remember({{"c1"}, "C"});
  EXPECT_TRUE(m.block_for({"a1"}));  // a1 becomes the most recent
  m.remember({{"d1"}, "D"});         // drops b1
  EXPECT_FALSE(m.block_for({"b1"}));
  EXPECT_TRUE(m.block_for({"a1"}));
  EXPECT_TRUE(m.block_for({"c1"}));
  EXPECT_TRUE(m.block_for({"d1"}));
  ToolMemory small({.max_ids = 100, .max_bytes = 10});
  small.remember({{"id1"}, "1234"});  // 3 + 4 = 7 bytes
  small.remember({{"id2"}, "5678"});  // 14 > 10: id1 dropped
  EXPECT_FALSE(small.block_for({"id1"}));
  EXPECT_EQ(small.block_for({"id2"}), "5678");
  EXPECT_EQ(small.bytes(), 7u);
}

TEST(ToolMemory, BlocksInText) {
  ToolMemory m;
  m.remember({{"a", "b"}, "<X>"});
  m.remember({{"c"}, "<Y>"});
  const auto in = m.blocks_in("prefix <Y> suffix");
  ASSERT_EQ(in.size(), 1u);
  EXPECT_EQ(in[0].ids, std::vector<std::string>{"c"});
  EXPECT_TRUE(m.blocks_in("nothing").empty());
}

TEST(ExtractToolBlock, FromTheSampledText) {
  const std::string block = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  EXPECT_EQ(extract_tool_block("think</think>Answer." + block, true, "Answer."), block);
  EXPECT_EQ(extract_tool_block("Answer." + block, false, "Answer."), block);
  EXPECT_EQ(extract_tool_block(" <tool_calls></tool_calls>", false, ""), " <tool_calls></tool_calls>");
  EXPECT_EQ(extract_tool_block("x <DSML｜tool_calls>..", false, "x"), " <DSML｜tool_calls>..");
  // DSML inside the reasoning is not a tool block; no </think> means no answer at all.
  EXPECT_FALSE(extract_tool_block("<tool_calls></tool_calls>", true, ""));
  EXPECT_FALSE(extract_tool_block("Answer.", false, "Answer."));
  // The parsed content must be exactly the text before the block, or a replay would differ.
  EXPECT_FALSE(extract_tool_block("Answer." + block, false, "Answer"));
}

TEST(ApplyExactReplay, RendersKnownBlocksVerbatim) {
  ToolMemory m;
  const std::string raw = "  <tool_calls>\n<invoke name=\"f\"></invoke>\n</tool_calls>";
  m.remember({{"call_1"}, raw});
  oj conv = {{"messages",
              {{{"role", "user"}, {"content", "q"}},
               {{"role", "assistant"}, {"content", "A"},
                {"tool_calls", {{{"id", "call_1"}, {"type", "function"},
                                 {"function", {{"name", "f"}, {"arguments", "{}"}}}}}}},
               {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "r"}},
               {{"role", "assistant"}, {"content", "B"},
                {"tool_calls", {{{"id", "call_2"}, {"type", "function"},
                                 {"function", {{"name", "f"}, {"arguments", "{\"k\": 1}"}}}}}}},
               {{"role", "tool"}, {"tool_call_id", "call_2"}, {"content", "r"}}}}};
  oj replayed = conv;
  EXPECT_EQ(apply_exact_replay(replayed["messages"], m), 1u);
  chat::RenderOptions ro;
  ro.think_mode = chat::ThinkMode::chat;
  const std::string text = chat::render_prompt(replayed, ro);
  EXPECT_NE(text.find("A" + raw + "<｜end▁of▁sentence｜>"), std::string::npos) << text;
  // The unknown id keeps the canonical form, and the rest of the rendering is unchanged.
  const std::string canonical_b =
      chat::render_tool_calls_dsml(replayed["messages"][3]["tool_calls"]);
  EXPECT_NE(text.find("B" + canonical_b + "<｜end▁of▁sentence｜>"), std::string::npos);
  std::string plain = chat::render_prompt(conv, ro);
  const std::string canonical_a = chat::render_tool_calls_dsml(conv["messages"][1]["tool_calls"]);
  plain.replace(plain.find(canonical_a), canonical_a.size(), raw);
  EXPECT_EQ(text, plain);
  // dsml_raw is an assistant-only key.
  oj bad = {{{"role", "user"}, {"content", "q"}, {"dsml_raw", "x"}}};
  EXPECT_THROW(chat::render_prompt(bad, ro), Error);
}

}  // namespace
}  // namespace ds4::server
