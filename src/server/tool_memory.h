// Exact DSML replay (product-surface §3.4 "If the assistant message has a known raw sampled
// block", §3.9 "Exact DSML replay map"): every tool-call id the server hands out maps to the
// complete tool_calls block the model sampled, so the next turn that sends those calls back
// renders the model's own bytes instead of the canonical JSON->DSML form; the rendered history
// then extends the live session byte for byte and its prefix is reused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace ds4::server {

/// Capacity limits of ToolMemory (`--tool-memory-max-ids`; the byte cap is fixed by §2.2).
struct ToolMemoryLimits {
  size_t max_ids = 100000;               ///< ids remembered (least recently used dropped first)
  size_t max_bytes = size_t{512} << 20;  ///< bytes of ids + blocks remembered
};

/// One remembered block: the ids of its calls in order and the sampled bytes.
struct ToolBlock {
  std::vector<std::string> ids;
  std::string dsml;  ///< separator whitespace + `<...tool_calls>` ... `</...tool_calls>` as sampled
};

/// LRU map from tool-call id to the sampled DSML block it came from. Thread-safe: the worker
/// remembers blocks, connection threads look them up while rendering.
class ToolMemory {
 public:
  explicit ToolMemory(ToolMemoryLimits limits = {});

  /// Remembers `block` for each of its ids (ids that already exist are replaced). Ids must be
  /// non-empty; an empty id list or an empty block is ignored. Evicts least recently used ids
  /// beyond the limits.
  void remember(const ToolBlock& block);

  /// The block when `ids` (in order) are exactly the ids of one remembered block; marks them
  /// recently used. nullopt when any id is unknown, they come from different blocks, or the
  /// block has other calls too.
  std::optional<std::string> block_for(const std::vector<std::string>& ids);

  /// The remembered blocks whose bytes occur in `text`, among the `max_blocks` most recently
  /// used ones (the KTM section of a disk snapshot, §4.2: only entries whose DSML appears in the
  /// key text are stored; the blocks of the live session are the recent ones, and the bound keeps
  /// a save from searching a 100000-id map).
  std::vector<ToolBlock> blocks_in(std::string_view text, size_t max_blocks = 256) const;

  /// True when `id` is remembered.
  bool has(const std::string& id) const;

  size_t ids() const;
  size_t bytes() const;

 private:
  struct Entry {
    std::shared_ptr<const ToolBlock> block;
    std::list<std::string>::iterator lru;
  };
  void drop_oldest_locked();

  ToolMemoryLimits limits_;
  mutable std::mutex mu_;
  std::list<std::string> lru_;  // front = most recently used id
  std::unordered_map<std::string, Entry> map_;
  size_t bytes_ = 0;
};

/// Adds `dsml_raw` (the exact sampled block) to every assistant message of `messages` (renderer
/// format, chat::render_prompt) whose tool_calls ids are all known and come from one block;
/// other tool calls keep the canonical rendering. Returns the number of messages replayed.
size_t apply_exact_replay(nlohmann::ordered_json& messages, ToolMemory& memory);

/// The raw tool block of a generated turn: from the ASCII whitespace before the first
/// tool_calls open tag (any of the three DSML spellings) that follows the reasoning, to the end
/// of `sampled`. nullopt when there is no such tag, or when `content` (the parsed answer) is not
/// exactly the text between the reasoning and that whitespace (then a replay could not be exact).
/// `starts_in_thinking`: the text starts inside `<think>`; the search begins after `</think>`.
std::optional<std::string> extract_tool_block(std::string_view sampled, bool starts_in_thinking,
                                              std::string_view content);

}  // namespace ds4::server
