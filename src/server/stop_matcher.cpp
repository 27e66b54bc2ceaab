#include "server/stop_matcher.h"

#include <algorithm>

namespace ds4::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

bool StopMatcher::feed(std::string_view text, std::string& out) {
  if (stops_.empty()) {
    out.append(text);
    return false;
  }
  held_.append(text);
  // First completed occurrence: the smallest end offset, ties to the longer string.
  size_t best_end = std::string::npos, best_start = 0;
  const std::string* best = nullptr;
  for (const auto& s : stops_) {
    const size_t at = held_.find(s);
    if (at == std::string::npos) continue;
    const size_t end = at + s.size();
    if (end < best_end || (end == best_end && at < best_start)) {
      best_end = end;
      best_start = at;
      best = &s;
    }
  }
  if (best) {
    out.append(held_, 0, best_start);
    matched_ = *best;
    held_.clear();
    return true;
  }
  size_t keep = 0;
  for (const auto& s : stops_) {
    const size_t max_j = std::min(s.size() - 1, held_.size());
    for (size_t j = max_j; j > keep; --j) {
      if (std::string_view(held_).substr(held_.size() - j) == std::string_view(s).substr(0, j)) {
        keep = j;
        break;
      }
    }
  }
  out.append(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return false;
}

void StopMatcher::finish(std::string& out) {
  out += held_;
  held_.clear();
}

}  // namespace ds4::server
