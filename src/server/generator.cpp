#include "server/generator.h"

#include <algorithm>

#include "common/error.h"
#include "tokenizer/special_tokens.h"

namespace ds4::server {

ModelGenerator::ModelGenerator(Engine& engine, int64_t ctx, int64_t prefill_chunk)
    : engine_(engine),
      session_(engine.config(), engine.backend(), ctx),
      chunk_(prefill_chunk),
      decoder_(engine.tokenizer()) {
  const auto eos = engine.tokenizer().find_token(tok::kEosToken);
  if (!eos) fail("the model's vocabulary has no end-of-sentence token {}", tok::kEosToken);
  eos_ = *eos;
}

int64_t ModelGenerator::prepare(std::span<const int32_t> prompt, const std::function<void()>& tick) {
  pending_.reset();
  decoder_.finish();
  return session_.sync(prompt, chunk_, [&](int64_t, int64_t) {
    if (tick) tick();
  });
}

GenStep ModelGenerator::next(Sampler& sampler) {
  if (pending_) {
    session_.decode(*pending_);
    pending_.reset();
  }
  const int32_t id = sampler.sample(session_.logits());
  if (id == eos_) return {true, {}};
  pending_ = id;
  return {false, decoder_.push(id)};
}

std::string ModelGenerator::flush() { return decoder_.finish(); }

int64_t ModelGenerator::remaining() const {
  return session_.remaining() - (pending_ ? 1 : 0);
}

void ModelGenerator::invalidate() {
  pending_.reset();
  session_.reset();
}

ScriptedGenerator::ScriptedGenerator(std::vector<std::string> pieces, int64_t ctx, bool eos_at_end)
    : pieces_(std::move(pieces)), ctx_(ctx), eos_at_end_(eos_at_end) {}

int64_t ScriptedGenerator::prepare(std::span<const int32_t> prompt, const std::function<void()>& tick) {
  if (tick) tick();
  size_t common = 0;
  while (common < live_.size() && common < prompt.size() && live_[common] == prompt[common]) ++common;
  if (common == prompt.size() && common > 0) --common;
  live_.assign(prompt.begin(), prompt.end());
  used_ = static_cast<int64_t>(prompt.size());
  at_ = 0;
  return static_cast<int64_t>(common);
}

GenStep ScriptedGenerator::next(Sampler&) {
  if (at_ >= pieces_.size()) return {eos_at_end_, {}};
  ++used_;
  return {false, pieces_[at_++]};
}

}  // namespace ds4::server
