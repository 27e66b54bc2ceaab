// Stop strings over streamed text (product-surface §3.6-3.7, failure-modes item 8): text that
// could still be the start of a stop string is held back; a completed stop string cuts the text
// before it. The result does not depend on how the text was split into chunks (item 5).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ds4::server {

/// Matches stop strings in text fed in arbitrary chunks. The winning stop string is the one that
/// completes first (smallest end offset; on a tie the longer one, i.e. the earlier start), which
/// is what a streaming consumer sees and what the whole-text search gives too. Empty stop strings
/// are ignored. The held-back tail is the longest suffix that is a proper prefix of a stop string,
/// so held text never exceeds max_stop_len - 1 bytes. Stop strings are valid UTF-8, so released
/// text is cut only at character boundaries of UTF-8 input.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  /// Appends to `out` the text that can no longer be part of a stop string. Returns true when a
  /// stop string completed: `out` then ends right before it and matched() names it; feed() must
  /// not be called again.
  bool feed(std::string_view text, std::string& out);

  /// Releases the held-back tail (the text ended without a match).
  void finish(std::string& out);

  /// The stop string that matched, or "" when none did.
  const std::string& matched() const { return matched_; }
  bool active() const { return !stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  std::string matched_;
};

}  // namespace ds4::server
