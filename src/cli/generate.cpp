#include "cli/generate.h"

#include <chrono>
#include <cstdio>

#include "common/error.h"
#include "engine/progress.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/stream_decoder.h"

namespace ds4::cli {

std::vector<int32_t> build_prompt(const Engine& engine, const std::string& system,
                                  const std::string& user, chat::ThinkMode mode, int64_t ctx) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  messages.push_back({{"role", "user"}, {"content", user}});
  chat::RenderOptions ro;
  ro.think_mode = mode;
  ro.ctx = ctx;
  return engine.tokenizer().encode_with_specials(chat::render_prompt(messages, ro));
}

TurnStats generate(Engine& engine, Session& session, const std::vector<int32_t>& prompt,
                   Sampler& sampler, int64_t max_tokens, const std::atomic<bool>& stop) {
  using clock = std::chrono::steady_clock;
  TurnStats st;
  if (static_cast<int64_t>(prompt.size()) >= session.ctx())
    fail("the prompt has {} tokens, but the context size is {} tokens (use a larger --ctx)",
         prompt.size(), session.ctx());
  const auto t0 = clock::now();
  {
    ProgressBar bar("prefill", prompt.size());
    const int64_t reused = session.sync(prompt, engine.prefill_chunk(), [&](int64_t done, int64_t) {
      bar.update(static_cast<uint64_t>(done) + (prompt.size() - session.tokens().size()));
    });
    st.prompt_tokens = static_cast<int64_t>(prompt.size()) - reused;
    bar.finish();
  }
  st.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();

  const auto& tok = engine.tokenizer();
  const auto eos = tok.find_token(tok::kEosToken);
  tok::StreamDecoder decoder(tok);
  const auto t1 = clock::now();
  while (st.generated < max_tokens && session.remaining() > 0 && !stop.load()) {
    const int32_t next = sampler.sample(session.logits());
    ++st.generated;
    if (eos && next == *eos) {
      st.hit_eos = true;
      session.decode(next);  // keep the transcript well-formed for the next turn
      break;
    }
    const std::string text = decoder.push(next);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if (session.remaining() == 0) break;
    session.decode(next);
  }
  const std::string tail = decoder.finish();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  st.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  st.context_full = !st.hit_eos && st.generated < max_tokens && !stop.load();
  return st;
}

}  // namespace ds4::cli
