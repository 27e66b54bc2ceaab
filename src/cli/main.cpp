// ds4: one-shot generation (-p / --prompt-file), an interactive chat REPL, and diagnostics
// (--dump-tokens, --render-chat, --dump-logprobs, --inspect). Flags follow ds4's (product-surface §2.1).
#include <csignal>
#include <cstdio>

#include "cli/generate.h"
#include "cli/logprobs.h"
#include "cli/perplexity.h"
#include "cli/options.h"
#include "cli/repl.h"
#include "common/error.h"
#include "common/read_file.h"
#include "engine/engine.h"
#include "model/kv_state.h"
#include "tokenizer/utf8.h"

#ifndef DS4_DEFAULT_MODEL
#define DS4_DEFAULT_MODEL "ds4flash.gguf"
#endif

namespace {

std::atomic<bool> g_stop{false};
void on_sigint(int) { g_stop.store(true); }

ds4::chat::ThinkMode think_mode(const ds4::cli::Options& o) {
  using ds4::cli::ThinkFlag;
  switch (o.think) {
    case ThinkFlag::nothink: return ds4::chat::ThinkMode::chat;
    case ThinkFlag::think_max: return ds4::chat::ThinkMode::max;
    default: return ds4::chat::ThinkMode::thinking;
  }
}

void check_utf8(const std::string& text, const char* what) {
  if (const size_t ok = ds4::tok::utf8_valid_until(text); ok != text.size())
    ds4::fail("{} is not valid UTF-8 (byte {})", what, ok);
}

int run(const ds4::cli::Options& o) {
  const std::string model = o.model.empty() ? DS4_DEFAULT_MODEL : o.model;
  std::optional<std::string> prompt = o.prompt;
  if (o.prompt_file) prompt = ds4::read_file(*o.prompt_file);
  if (prompt) check_utf8(*prompt, o.prompt_file ? o.prompt_file->c_str() : "the prompt");

  if (o.render_chat) {
    ds4::chat::RenderOptions ro;
    ro.think_mode = ds4::chat::parse_think_mode(o.think_mode);
    ro.ctx = o.ctx;
    if (ds4::chat::effective_think_mode(ro.think_mode, o.ctx) != ro.think_mode)
      std::fprintf(stderr, "ds4: Think Max needs --ctx >= %lld; rendering normal thinking\n",
                   static_cast<long long>(ds4::chat::kThinkMaxMinContext));
    const std::string text = ds4::chat::render_prompt_json_text(ds4::read_file(*o.render_chat), ro);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  if (o.dump_tokens) {
    if (!prompt) ds4::fail("--dump-tokens needs -p or --prompt-file");
    auto tok = ds4::Engine::open_tokenizer(model);
    for (int32_t id : tok->encode_with_specials(*prompt))
      std::printf("%d\t%s\n", id, nlohmann::json(tok->token_piece(id)).dump(-1, ' ', false,
                  nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }

  auto engine = ds4::Engine::open({.model_path = model, .backend = o.backend, .threads = o.threads,
                                   .gpu_devices = o.gpu_devices, .gpu_vram = o.gpu_vram,
                                   .plan_ctx = o.ctx, .cuda_tensor_parallel = o.cuda_tensor_parallel});
  const auto& cfg = engine->config();
  const auto est = ds4::model::KvState::estimate(cfg, o.ctx);
  std::fprintf(stderr, "ds4: %s (%s, %u layers, vocab %u), backend %s\n", model.c_str(),
               std::string(ds4::model::variant_name(cfg.variant())).c_str(), cfg.n_layer,
               cfg.n_vocab, engine->backend().name().c_str());
  std::fprintf(stderr, "ds4: context buffers %.1f MiB (ctx %lld, raw_kv_rows %u)\n",
               static_cast<double>(est.total()) / (1 << 20), static_cast<long long>(o.ctx),
               est.raw_cap);
  if (o.inspect) {
    std::printf("model: %s\nvariant: %s\nlayers: %u\nembedding: %u\nvocab: %u\nexperts: %u (%u used)\n"
                "weights: %.1f MiB\n", model.c_str(),
                std::string(ds4::model::variant_name(cfg.variant())).c_str(), cfg.n_layer,
                cfg.n_embd, cfg.n_vocab, cfg.n_expert, cfg.n_expert_used,
                static_cast<double>(engine->weights().matrix_bytes) / (1 << 20));
    return 0;
  }
  const auto mode = ds4::chat::effective_think_mode(think_mode(o), o.ctx);
  if (think_mode(o) == ds4::chat::ThinkMode::max && mode != ds4::chat::ThinkMode::max)
    std::fprintf(stderr, "ds4: --think-max needs --ctx >= %lld; using normal thinking\n",
                 static_cast<long long>(ds4::chat::kThinkMaxMinContext));

  ds4::Session session(cfg, engine->backend(), o.ctx);
  if (o.perplexity_file) {
    const std::string text = ds4::read_file(*o.perplexity_file);
    check_utf8(text, o.perplexity_file->c_str());
    const auto tokens = engine->tokenizer().encode_plain(text);
    const auto r = ds4::cli::perplexity(session, tokens);
    std::printf("%s\n", ds4::cli::format_perplexity(r).c_str());
    return 0;
  }
  if (o.raw_prompt && !prompt) ds4::fail("--raw-prompt needs -p or --prompt-file");
  const auto prompt_tokens = [&] {
    return o.raw_prompt ? engine->tokenizer().encode_with_specials(*prompt)
                        : ds4::cli::build_prompt(*engine, o.system, *prompt, mode, o.ctx);
  };
  if (o.dump_logprobs) {
    if (!prompt) ds4::fail("--dump-logprobs needs -p or --prompt-file");
    const auto tokens = prompt_tokens();
    ds4::cli::dump_logprobs(*engine, session, tokens, o.max_tokens, o.logprobs_top_k, *o.dump_logprobs);
    std::fprintf(stderr, "ds4: wrote %s\n", o.dump_logprobs->c_str());
    return 0;
  }
  std::signal(SIGINT, on_sigint);
  if (!prompt) return ds4::cli::run_repl(*engine, session, o, mode, g_stop);

  ds4::Sampler sampler(o.sampling);
  const auto tokens = prompt_tokens();
  const auto st = ds4::cli::generate(*engine, session, tokens, sampler, o.max_tokens, g_stop);
  if (st.context_full) std::fprintf(stderr, "ds4: stopped: the context of %lld tokens is full\n",
                                    static_cast<long long>(o.ctx));
  std::fprintf(stderr, "prefill: %.2f t/s (%lld tokens), generation: %.2f t/s (%lld tokens)\n",
               st.prefill_seconds > 0 ? st.prompt_tokens / st.prefill_seconds : 0.0,
               static_cast<long long>(st.prompt_tokens),
               st.decode_seconds > 0 ? st.generated / st.decode_seconds : 0.0,
               static_cast<long long>(st.generated));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const auto options = ds4::cli::parse_options(argc, argv);
  try {
    return run(options);
  } catch (const ds4::Error& e) {
    std::fprintf(stderr, "ds4: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds4: error: %s\n", e.what());
    return 1;
  }
}
