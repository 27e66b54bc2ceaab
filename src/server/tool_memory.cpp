#include "server/tool_memory.h"

#include <algorithm>
#include <memory>

#include "chat/dsml.h"
#include "chat/text_util.h"

namespace ds4::server {

ToolMemory::ToolMemory(ToolMemoryLimits limits) : limits_(limits) {}

void ToolMemory::drop_oldest_locked() {
  const std::string id = lru_.back();
  lru_.pop_back();
  auto it = map_.find(id);
  bytes_ -= id.size() + it->second.block->dsml.size();
  map_.erase(it);
}

void ToolMemory::remember(const ToolBlock& block) {
  if (block.ids.empty() || block.dsml.empty()) return;
  for (const auto& id : block.ids)
    if (id.empty()) return;
  auto shared = std::make_shared<const ToolBlock>(block);
  std::lock_guard lock(mu_);
  for (const auto& id : block.ids) {
    if (auto it = map_.find(id); it != map_.end()) {
      bytes_ -= id.size() + it->second.block->dsml.size();
      lru_.erase(it->second.lru);
      map_.erase(it);
    }
    lru_.push_front(id);
    map_[id] = {shared, lru_.begin()};
    // Each id accounts for its own copy of the block: a bound that holds however blocks are shared.
    bytes_ += id.size() + block.dsml.size();
  }
  while (!lru_.empty() && (map_.size() > limits_.max_ids || bytes_ > limits_.max_bytes))
    drop_oldest_locked();
}

std::optional<std::string> ToolMemory::block_for(const std::vector<std::string>& ids) {
  if (ids.empty()) return std::nullopt;
  std::lock_guard lock(mu_);
  std::shared_ptr<const ToolBlock> block;
  for (const auto& id : ids) {
    auto it = map_.find(id);
    if (it == map_.end()) return std::nullopt;
    if (block && it->second.block != block) return std::nullopt;
    block = it->second.block;
  }
  if (block->ids != ids) return std::nullopt;
  for (const auto& id : ids) {
    auto& e = map_[id];
    lru_.splice(lru_.begin(), lru_, e.lru);
  }
  return block->dsml;
}

std::vector<ToolBlock> ToolMemory::blocks_in(std::string_view text, size_t max_blocks) const {
  std::lock_guard lock(mu_);
  std::vector<ToolBlock> out;
  std::vector<const ToolBlock*> seen;
  for (const auto& id : lru_) {
    const ToolBlock* b = map_.at(id).block.get();
    if (std::find(seen.begin(), seen.end(), b) != seen.end()) continue;
    if (seen.size() >= max_blocks) break;
    seen.push_back(b);
    if (text.find(b->dsml) != std::string_view::npos) out.push_back(*b);
  }
  return out;
}

bool ToolMemory::has(const std::string& id) const {
  std::lock_guard lock(mu_);
  return map_.count(id) > 0;
}

size_t ToolMemory::ids() const {
  std::lock_guard lock(mu_);
  return map_.size();
}

size_t ToolMemory::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

size_t apply_exact_replay(nlohmann::ordered_json& messages, ToolMemory& memory) {
  if (!messages.is_array()) return 0;
  size_t replayed = 0;
  for (auto& m : messages) {
    if (!m.is_object() || m.value("role", "") != "assistant") continue;
    const auto calls = m.find("tool_calls");
    if (calls == m.end() || !calls->is_array() || calls->empty()) continue;
    std::vector<std::string> ids;
    for (const auto& c : *calls) {
      if (!c.is_object() || !c.contains("id") || !c["id"].is_string()) break;
      ids.push_back(c["id"].get<std::string>());
    }
    if (ids.size() != calls->size()) continue;
    if (auto block = memory.block_for(ids)) {
      m["dsml_raw"] = std::move(*block);
      ++replayed;
    }
  }
  return replayed;
}

std::optional<std::string> extract_tool_block(std::string_view sampled, bool starts_in_thinking,
                                              std::string_view content) {
  size_t answer = 0;
  if (starts_in_thinking) {
    const size_t end = sampled.find(chat::kThinkEnd);
    if (end == std::string_view::npos) return std::nullopt;
    answer = end + chat::kThinkEnd.size();
  }
  size_t open = std::string_view::npos;
  for (auto spelling : {chat::DsmlSpelling::full, chat::DsmlSpelling::missing_first_bar,
                        chat::DsmlSpelling::plain}) {
    const std::string tag = chat::dsml_open(spelling, "tool_calls") + ">";
    const size_t at = sampled.find(tag, answer);
    if (at < open) open = at;
  }
  if (open == std::string_view::npos) return std::nullopt;
  size_t start = open;
  while (start > answer && chat::is_ascii_space(sampled[start - 1])) --start;
  if (sampled.substr(answer, start - answer) != content) return std::nullopt;
  return std::string(sampled.substr(start));
}

}  // namespace ds4::server
