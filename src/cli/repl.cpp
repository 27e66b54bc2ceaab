#include "cli/repl.h"

#include <editline/readline.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/generate.h"
#include "tokenizer/utf8.h"
#include "common/error.h"
#include "tokenizer/special_tokens.h"

namespace ds4::cli {
namespace {

constexpr const char* kHelp =
    "/help          this text\n"
    "/think         thinking mode (default)\n"
    "/nothink       answer without thinking\n"
    "/think-max     Think Max (needs ctx >= 393216)\n"
    "/ctx N         new session with a context of N tokens\n"
    "/read FILE     send the file's text as the next message\n"
    "/quit, /exit   leave (Ctrl+D too); Ctrl+C stops a running answer\n";

std::string history_path() {
  const char* home = std::getenv("HOME");
  return home ? std::string(home) + "/.ds4_history" : std::string();
}

}  // namespace

int run_repl(Engine& engine, Session& first_session, const Options& o, chat::ThinkMode mode,
             std::atomic<bool>& stop) {
  const auto& tok = engine.tokenizer();
  Session* session = &first_session;
  std::unique_ptr<Session> owned;
  int64_t ctx = o.ctx;
  std::vector<int32_t> transcript;  // what the session should hold after each turn
  Sampler sampler(o.sampling);
  std::string hist = history_path();
  stifle_history(512);
  // History only for people typing at a terminal (piped input is not a user's history).
  const bool interactive = isatty(STDIN_FILENO);
  if (!interactive) hist.clear();
  if (!hist.empty()) read_history(hist.c_str());
  std::fprintf(stderr, "ds4 interactive chat. /help for commands.\n");

  while (true) {
    stop.store(false);
    char* line_c = readline("ds4> ");
    if (!line_c) break;
    std::string line(line_c);
    std::free(line_c);
    if (line.empty()) continue;
    add_history(line.c_str());
    if (!hist.empty()) write_history(hist.c_str());

    std::string message = line;
    if (line[0] == '/') {
      std::istringstream in(line);
      std::string cmd, arg;
      in >> cmd;
      std::getline(in >> std::ws, arg);
      if (cmd == "/quit" || cmd == "/exit") break;
      if (cmd == "/help") { std::fputs(kHelp, stdout); continue; }
      auto set_mode = [&](chat::ThinkMode m) {
        const auto eff = chat::effective_think_mode(m, ctx);
        if (m == chat::ThinkMode::max && eff != m)
          std::fprintf(stderr, "Think Max needs ctx >= %lld; using normal thinking\n",
                       static_cast<long long>(chat::kThinkMaxMinContext));
        if ((eff == chat::ThinkMode::max) != (mode == chat::ThinkMode::max)) transcript.clear();
        mode = eff;
      };
      if (cmd == "/think") { set_mode(chat::ThinkMode::thinking); continue; }
      if (cmd == "/nothink") { set_mode(chat::ThinkMode::chat); continue; }
      if (cmd == "/think-max") { set_mode(chat::ThinkMode::max); continue; }
      if (cmd == "/ctx") {
        try {
          const int64_t n = std::stoll(arg);
          if (n < 16) throw std::invalid_argument("small");
          owned = std::make_unique<Session>(engine.config(), engine.backend(), n);
          session = owned.get();
          ctx = n;
          transcript.clear();
          std::fprintf(stderr, "new session, ctx %lld\n", static_cast<long long>(n));
        } catch (const Error& e) {
          std::fprintf(stderr, "/ctx: %s\n", e.what());
        } catch (const std::exception&) {
          std::fprintf(stderr, "usage: /ctx N (N >= 16 tokens)\n");
        }
        continue;
      }
      if (cmd == "/read") {
        std::ifstream f(arg, std::ios::binary);
        if (!f) { std::fprintf(stderr, "cannot read '%s'\n", arg.c_str()); continue; }
        std::stringstream ss;
        ss << f.rdbuf();
        message = ss.str();
      } else {
        std::fprintf(stderr, "unknown command %s (/help lists them)\n", cmd.c_str());
        continue;
      }
    }

    // Next prompt = transcript so far (closed with EOS) + the new user turn.
    const size_t before = transcript.size();
    try {
    if (const size_t ok = tok::utf8_valid_until(message); ok != message.size())
      fail("the message is not valid UTF-8 (byte {}); nothing was sent", ok);
    std::vector<int32_t> prompt;
    if (transcript.empty()) {
      prompt = build_prompt(engine, o.system, message, mode, ctx);
    } else {
      prompt = transcript;
      const auto eos = tok.find_token(tok::kEosToken);
      if (eos && prompt.back() != *eos) prompt.push_back(*eos);
      std::string turn = std::string(tok::kUserToken) + message + std::string(tok::kAssistantToken) +
                         std::string(mode == chat::ThinkMode::chat ? tok::kThinkEndToken
                                                                   : tok::kThinkBeginToken);
      const auto more = tok.encode_with_specials(turn);
      prompt.insert(prompt.end(), more.begin(), more.end());
    }
      const auto st = generate(engine, *session, prompt, sampler, o.max_tokens, stop);
      transcript = session->tokens();
      std::fprintf(stderr, "prefill: %.2f t/s, generation: %.2f t/s%s\n",
                   st.prefill_seconds > 0 ? st.prompt_tokens / st.prefill_seconds : 0.0,
                   st.decode_seconds > 0 ? st.generated / st.decode_seconds : 0.0,
                   stop.load() ? " (stopped)" : "");
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      transcript.resize(before);  // roll the failed turn back (the session re-syncs next turn)
    }
  }
  return 0;
}

}  // namespace ds4::cli
