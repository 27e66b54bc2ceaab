#include "server/prefix_reuse.h"

#include "chat/dsml.h"

namespace ds4::server {

std::optional<std::string> thinking_visible_key(std::string_view prompt_text, std::string_view content) {
  if (!prompt_text.ends_with(chat::kThinkStart)) return std::nullopt;
  std::string key(prompt_text.substr(0, prompt_text.size() - chat::kThinkStart.size()));
  key += chat::kThinkEnd;
  key += content;
  key += chat::kEos;
  return key;
}

const char* reuse_step_name(ReuseStep step) {
  switch (step) {
    case ReuseStep::none: return "none";
    case ReuseStep::token_prefix: return "token-prefix";
    case ReuseStep::thinking_visible: return "thinking-visible";
    case ReuseStep::text_prefix: return "text-prefix";
  }
  return "none";
}

PrefixPlan plan_prefix(const tok::Tokenizer& tokenizer, std::span<const int32_t> live,
                       const std::optional<VisibleAlias>& alias, std::span<const int32_t> prompt,
                       std::string_view prompt_text, int64_t ctx) {
  PrefixPlan plan;
  plan.tokens.assign(prompt.begin(), prompt.end());
  if (live.empty()) return plan;
  size_t common = 0;
  while (common < live.size() && common < prompt.size() && live[common] == prompt[common]) ++common;
  if (common == live.size()) {
    plan.step = ReuseStep::token_prefix;
    return plan;
  }
  auto extend = [&](std::span<const int32_t> tail, std::string_view rest, ReuseStep step) {
    std::vector<int32_t> t(live.begin(), live.end());
    t.insert(t.end(), tail.begin(), tail.end());
    const auto more = tokenizer.encode_with_specials(rest);
    t.insert(t.end(), more.begin(), more.end());
    if (static_cast<int64_t>(t.size()) >= ctx) return false;
    plan.tokens = std::move(t);
    plan.step = step;
    return true;
  };
  if (alias && alias->live_tokens == live.size() && prompt_text.starts_with(alias->text) &&
      extend(alias->tail, prompt_text.substr(alias->text.size()), ReuseStep::thinking_visible))
    return plan;
  const std::string live_text = tokenizer.decode(live);
  if (!live_text.empty() && prompt_text.starts_with(live_text)) {
    const std::string_view rest = prompt_text.substr(live_text.size());
    const bool boundary = rest.empty() || (static_cast<unsigned char>(rest[0]) & 0xC0) != 0x80;
    if (boundary && extend({}, rest, ReuseStep::text_prefix)) return plan;
  }
  return plan;
}

}  // namespace ds4::server
