#include "server/generator.h"

#include <algorithm>

#include "common/error.h"
#include "tokenizer/special_tokens.h"

namespace ds4::server {

int64_t continued_save_step(int64_t interval, int64_t align) {
  if (interval <= 0) return 0;
  if (align <= 0) return interval;
  return (interval + align - 1) / align * align;
}

ModelGenerator::ModelGenerator(Engine& engine, int64_t ctx, int64_t prefill_chunk,
                               KvDiskCache* cache, KvPlacement placement, ToolMemory* tools)
    : engine_(engine),
      session_(engine.config(), engine.backend(), ctx),
      chunk_(prefill_chunk),
      cache_(cache),
      placement_(placement),
      tools_(tools),
      continued_step_(continued_save_step(placement.continued_tokens, placement.align_tokens)),
      decoder_(engine.tokenizer()) {
  session_.set_checkpointing(true);  // follow-ups that re-render the answer resume at the prompt
  const auto eos = engine.tokenizer().find_token(tok::kEosToken);
  if (!eos) fail("the model's vocabulary has no end-of-sentence token {}", tok::kEosToken);
  eos_ = *eos;
}

int64_t ModelGenerator::cold_save_point(std::span<const int32_t> prompt, int32_t user_id,
                                        int32_t assistant_id, int64_t min_tokens,
                                        const KvPlacement& p) {
  int64_t last_user = -1;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] == assistant_id) break;
    if (prompt[i] == user_id) last_user = static_cast<int64_t>(i);
  }
  if (last_user >= min_tokens) return last_user;
  int64_t n = static_cast<int64_t>(prompt.size()) - p.trim_tokens;
  if (p.align_tokens > 0) n -= n % p.align_tokens;
  return n >= min_tokens ? n : 0;
}

void ModelGenerator::save_live(SaveReason reason) {
  const auto& live = session_.tokens();
  if (!cache_ || static_cast<int64_t>(live.size()) < cache_->options().min_tokens) return;
  const std::string text = engine_.tokenizer().decode(live);
  const auto tools = tools_ ? tools_->blocks_in(text) : std::vector<ToolBlock>();
  if (cache_->store(text, static_cast<uint32_t>(live.size()), session_.save(), reason, tools))
    last_saved_ = static_cast<int64_t>(live.size());
}

int64_t ModelGenerator::sync_with_saves(std::span<const int32_t> tokens, const ProgressFn& progress) {
  std::optional<int64_t> kept;
  if (cache_ && continued_step_ > 0) {
    const int64_t min = cache_->options().min_tokens;
    const auto n = static_cast<int64_t>(tokens.size());
    const auto& live = session_.tokens();
    int64_t common = 0;
    while (common < static_cast<int64_t>(live.size()) && common < n && live[common] == tokens[common]) ++common;
    for (int64_t at = (common / continued_step_ + 1) * continued_step_; at < n; at += continued_step_) {
      if (at < min || at <= last_saved_) continue;
      const int64_t k = session_.sync(tokens.subspan(0, static_cast<size_t>(at)), chunk_, progress);
      if (!kept) kept = k;
      save_live(SaveReason::continued);
    }
  }
  const int64_t k = session_.sync(tokens, chunk_, progress);
  return kept ? *kept : k;
}

void ModelGenerator::checkpoint() {
  if (!cache_ || continued_step_ <= 0) return;
  const auto n = static_cast<int64_t>(session_.tokens().size());
  if (n % continued_step_ == 0 && n > last_saved_ && n >= cache_->options().min_tokens)
    save_live(SaveReason::continued);
}

Prepared ModelGenerator::prepare(std::span<const int32_t> prompt, std::string_view prompt_text,
                                 const std::function<void()>& tick) {
  // The alias describes the frontier before the lazily evaluated tail; take it before clearing.
  std::optional<VisibleAlias> alias = std::move(alias_);
  alias_.reset();
  pending_.reset();
  eos_sampled_ = false;
  decoder_.finish();
  const ProgressFn progress = [&](int64_t, int64_t) {
    if (tick) tick();
  };
  const auto& tok = engine_.tokenizer();
  PrefixPlan plan = plan_prefix(tok, session_.tokens(), alias, prompt, prompt_text, session_.ctx());
  Prepared out;
  out.step = plan.step;
  std::vector<int32_t> effective = std::move(plan.tokens);
  auto common_with_live = [&](std::span<const int32_t> t) {
    const auto& live = session_.tokens();
    size_t c = 0;
    while (c < live.size() && c < t.size() && live[c] == t[c]) ++c;
    return c;
  };
  bool cold = false;
  if (cache_ && static_cast<int64_t>(common_with_live(effective)) < cache_->options().min_tokens) {
    const int64_t min = cache_->options().min_tokens;
    save_live(SaveReason::evict);
    const size_t common = common_with_live(prompt);
    const std::string text = prompt_text.empty() ? tok.decode(prompt) : std::string(prompt_text);
    auto hit = cache_->lookup(text);
    if (hit && hit->tokens > common) {
      try {
        session_.load(hit->payload);
      } catch (const Error&) {
        cache_->remove(hit->text);  // corrupt or for another model shape: never retry it
        session_.reset();
        hit.reset();
      }
    } else {
      hit.reset();
    }
    if (hit) {
      if (tools_)
        for (const auto& t : hit->tools) tools_->remember(t);
      last_saved_ = hit->tokens;
      out.disk_hit = true;
      out.step = ReuseStep::none;
      effective = session_.tokens();
      const auto rest = tok.encode_with_specials(std::string_view(text).substr(hit->text.size()));
      effective.insert(effective.end(), rest.begin(), rest.end());
      if (static_cast<int64_t>(effective.size()) >= session_.ctx())
        effective.assign(prompt.begin(), prompt.end());
    } else {
      effective.assign(prompt.begin(), prompt.end());
      out.step = ReuseStep::none;
      if (placement_.cold_max_tokens > 0 && static_cast<int64_t>(prompt.size()) >= min &&
          static_cast<int64_t>(prompt.size()) <= placement_.cold_max_tokens) {
        const tok::SpecialTokens sp = tok.special_tokens();
        const int64_t at = cold_save_point(prompt, sp.user, sp.assistant, min, placement_);
        if (at > 0 && at < static_cast<int64_t>(prompt.size())) {
          session_.sync(prompt.subspan(0, static_cast<size_t>(at)), chunk_, progress);
          save_live(SaveReason::cold);
          cold = true;  // computed by this request: not a reuse
        }
      }
    }
  }
  // Session::sync reports what it really kept: the common prefix when the live tokens only
  // grow, the rewind checkpoint (end of the last prompt) when generated tokens are dropped.
  const size_t common = common_with_live(effective);
  if (static_cast<int64_t>(common) < last_saved_) last_saved_ = static_cast<int64_t>(common);
  const int64_t kept = sync_with_saves(effective, progress);
  out.prompt_tokens = static_cast<int64_t>(effective.size());
  out.reused = cold ? 0 : kept;
  return out;
}

void ModelGenerator::remember_visible(std::string visible_text) {
  VisibleAlias a;
  a.text = std::move(visible_text);
  a.live_tokens = session_.tokens().size();
  if (pending_) a.tail.push_back(*pending_);
  if (!eos_sampled_) return;  // only a turn that ended with EOS has a rendered equivalent
  a.tail.push_back(eos_);
  alias_ = std::move(a);
}

void ModelGenerator::on_shutdown() {
  pending_.reset();
  save_live(SaveReason::shutdown);
}

GenStep ModelGenerator::next(Sampler& sampler) {
  if (pending_) {
    session_.decode(*pending_);
    pending_.reset();
  }
  const int32_t id = sampler.sample(session_.logits());
  if (id == eos_) {
    eos_sampled_ = true;
    return {true, {}};
  }
  pending_ = id;
  return {false, decoder_.push(id)};
}

std::string ModelGenerator::flush() { return decoder_.finish(); }

int64_t ModelGenerator::remaining() const {
  return session_.remaining() - (pending_ ? 1 : 0);
}

void ModelGenerator::invalidate() {
  pending_.reset();
  alias_.reset();
  last_saved_ = 0;
  session_.reset();
}

ScriptedGenerator::ScriptedGenerator(std::vector<std::string> pieces, int64_t ctx, bool eos_at_end)
    : pieces_(std::move(pieces)), ctx_(ctx), eos_at_end_(eos_at_end) {}

Prepared ScriptedGenerator::prepare(std::span<const int32_t> prompt, std::string_view prompt_text,
                                    const std::function<void()>& tick) {
  if (tick) tick();
  size_t common = 0;
  while (common < live_.size() && common < prompt.size() && live_[common] == prompt[common]) ++common;
  if (common == prompt.size() && common > 0) --common;
  live_.assign(prompt.begin(), prompt.end());
  last_text_ = prompt_text;
  temperatures_.clear();
  used_ = static_cast<int64_t>(prompt.size());
  at_ = 0;
  return {static_cast<int64_t>(prompt.size()), static_cast<int64_t>(common),
          common > 0 ? ReuseStep::token_prefix : ReuseStep::none, false};
}

GenStep ScriptedGenerator::next(Sampler& sampler) {
  temperatures_.push_back(sampler.settings().temperature);
  if (at_ >= pieces_.size()) return {eos_at_end_, {}};
  ++used_;
  return {false, pieces_[at_++]};
}

}  // namespace ds4::server
