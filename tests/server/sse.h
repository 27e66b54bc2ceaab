// Test helper: splits an SSE body into frames {event, data}.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace ds4::server::test {

struct SseFrame {
  std::string event;  // "" when the frame had no event line
  std::string data;   // raw data text
  nlohmann::ordered_json json() const { return nlohmann::ordered_json::parse(data); }
};

/// Parses `body`: frames are separated by a blank line; comment lines (": ...") are skipped.
inline std::vector<SseFrame> parse_sse(const std::string& body) {
  std::vector<SseFrame> frames;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string block = body.substr(pos, end - pos);
    pos = end + 2;
    SseFrame f;
    bool any = false;
    size_t lp = 0;
    while (lp < block.size()) {
      size_t le = block.find('\n', lp);
      if (le == std::string::npos) le = block.size();
      const std::string line = block.substr(lp, le - lp);
      lp = le + 1;
      if (line.rfind("event: ", 0) == 0) {
        f.event = line.substr(7);
        any = true;
      } else if (line.rfind("data: ", 0) == 0) {
        f.data += line.substr(6);
        any = true;
      }
    }
    if (any) frames.push_back(std::move(f));
  }
  return frames;
}

}  // namespace ds4::server::test
