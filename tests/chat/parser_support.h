// Helpers for the output-parser tests: run the parser over a text split at given offsets,
// normalize event streams, and check the invariants every event stream must satisfy.
#pragma once

#include "chat/output_parser.h"
#include "chat/text_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace ds4::chat::test {

struct Run {
  std::vector<ParseEvent> events;
  ParsedOutput result;
};

/// Feeds text[0:cuts[0]], text[cuts[0]:cuts[1]], ..., text[cuts.back():] and finishes.
inline Run parse_split(std::string_view text, const ParseOptions& options,
                       const std::vector<size_t>& cuts) {
  OutputParser parser(options);
  Run run;
  size_t from = 0;
  for (size_t cut : cuts) {
    parser.feed(text.substr(from, cut - from), run.events);
    from = cut;
  }
  parser.feed(text.substr(from), run.events);
  parser.finish(run.events);
  run.result = parser.result();
  return run;
}

/// Feeds one byte at a time.
inline Run parse_bytewise(std::string_view text, const ParseOptions& options) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < text.size(); ++i) cuts.push_back(i);
  return parse_split(text, options, cuts);
}

/// Merges adjacent deltas of one kind and call (the only thing chunking may change).
inline std::vector<ParseEvent> normalized(const std::vector<ParseEvent>& events) {
  std::vector<ParseEvent> out;
  for (const ParseEvent& e : events) {
    const bool delta = e.kind == ParseEventKind::reasoning_delta ||
                       e.kind == ParseEventKind::content_delta ||
                       e.kind == ParseEventKind::tool_args_delta;
    if (delta && !out.empty() && out.back().kind == e.kind && out.back().tool_index == e.tool_index) {
      out.back().text += e.text;
    } else {
      out.push_back(e);
    }
  }
  return out;
}

/// Invariants of one event stream: valid UTF-8 in every event, no empty deltas, the result is
/// exactly the events folded together, tool events well nested, arguments a JSON object, one
/// finish event at the end.
inline void check_stream(const Run& run, const std::string& label) {
  ParsedOutput folded;
  std::map<int, std::string> args;
  int open = -1;
  for (size_t i = 0; i < run.events.size(); ++i) {
    const ParseEvent& e = run.events[i];
    ASSERT_TRUE(is_valid_utf8(e.text)) << label << " event " << i << " has broken UTF-8";
    switch (e.kind) {
      case ParseEventKind::reasoning_delta:
      case ParseEventKind::content_delta:
        ASSERT_FALSE(e.text.empty()) << label;
        ASSERT_EQ(e.tool_index, -1) << label;
        break;
      case ParseEventKind::tool_call_begin:
        ASSERT_EQ(open, -1) << label << ": call begun inside another";
        ASSERT_EQ(e.tool_index, static_cast<int>(folded.tool_calls.size())) << label;
        open = e.tool_index;
        break;
      case ParseEventKind::tool_args_delta:
        ASSERT_EQ(e.tool_index, open) << label;
        ASSERT_FALSE(e.text.empty()) << label;
        args[e.tool_index] += e.text;
        break;
      case ParseEventKind::tool_call_end:
        ASSERT_EQ(e.tool_index, open) << label;
        open = -1;
        break;
      case ParseEventKind::finish:
        ASSERT_EQ(i + 1, run.events.size()) << label << ": finish is not last";
        break;
    }
    apply_parse_event(folded, e);
  }
  ASSERT_FALSE(run.events.empty());
  ASSERT_EQ(run.events.back().kind, ParseEventKind::finish) << label;
  ASSERT_EQ(open, -1) << label << ": a call was left open";
  EXPECT_EQ(folded.reasoning_content, run.result.reasoning_content) << label;
  EXPECT_EQ(folded.content, run.result.content) << label;
  ASSERT_EQ(folded.tool_calls, run.result.tool_calls) << label;
  for (size_t k = 0; k < run.result.tool_calls.size(); ++k) {
    const std::string& a = run.result.tool_calls[k].arguments;
    EXPECT_EQ(args[static_cast<int>(k)], a) << label;
    const auto parsed = nlohmann::json::parse(a, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << label << ": arguments are not JSON: " << a;
    EXPECT_TRUE(parsed.is_object()) << label << ": " << a;
  }
}

/// The whole-text parse and every split of `text` (each single offset, each pair of offsets when
/// the text is at most `pair_limit` bytes, and byte by byte) give the same normalized events and
/// the same result.
inline void check_split_invariance(std::string_view text, const ParseOptions& options,
                                   size_t pair_limit = 320) {
  const Run whole = parse_split(text, options, {});
  check_stream(whole, "whole");
  const auto want = normalized(whole.events);
  auto same = [&](const Run& r, const std::string& label) {
    check_stream(r, label);
    EXPECT_EQ(normalized(r.events), want) << label;
    EXPECT_EQ(r.result, whole.result) << label;
  };
  same(parse_bytewise(text, options), "bytewise");
  for (size_t i = 0; i <= text.size(); ++i) {
    same(parse_split(text, options, {i}), "split at " + std::to_string(i));
    if (::testing::Test::HasFailure()) return;
  }
  if (text.size() > pair_limit) return;
  for (size_t i = 0; i <= text.size(); ++i) {
    for (size_t j = i; j <= text.size(); ++j) {
      const Run r = parse_split(text, options, {i, j});
      if (normalized(r.events) != want || !(r.result == whole.result)) {
        ADD_FAILURE() << "split at " << i << "," << j << " differs";
        return;
      }
    }
  }
}

}  // namespace ds4::chat::test
