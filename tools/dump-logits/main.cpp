// ds4-dump-logits: evaluates a token list on the CPU forward pass and writes every position's
// logits (and optionally a greedy continuation and the per-layer trace) for parity checks
// against the Python reference (tools/reference/parity.py).
//
//   ds4-dump-logits -m M.gguf (--tokens 1,2,3 | --tokens-file F | --text-file F [--max-tokens N])
//                   -o DIR [--chunk N] [--greedy N] [--ctx N] [--threads N]
//                   [--trace [--trace-filter l2.,router]]

#include <CLI/CLI.hpp>
#include <cstdio>

#include "common/cli_checks.h"
#include "common/error.h"
#include "dump.h"
#include "parallel/thread_pool.h"
#include "token_input.h"
#include "trace_file.h"

namespace {

struct Args {
  std::string model, tokens, tokens_file, text_file, out;
  int64_t max_tokens = 0, chunk = 0, greedy = 0, ctx = 0;
  int threads = 0;
  bool trace = false;
  std::vector<std::string> trace_filter;
};

int run(const Args& a) {
  using namespace ds4;
  const int sources = !a.tokens.empty() + !a.tokens_file.empty() + !a.text_file.empty();
  if (sources != 1) fail("give exactly one of --tokens, --tokens-file, --text-file");
  if (a.max_tokens != 0 && a.text_file.empty()) fail("--max-tokens needs --text-file");
  if (!a.trace_filter.empty() && !a.trace) fail("--trace-filter needs --trace");

  auto engine = Engine::open({.model_path = a.model, .backend = "cpu", .threads = a.threads});
  dump::DumpRequest req;
  if (!a.tokens.empty()) req.prompt = dump::parse_token_list(a.tokens, "--tokens");
  if (!a.tokens_file.empty())
    req.prompt = dump::parse_token_list(dump::read_text_file(a.tokens_file), a.tokens_file);
  if (!a.text_file.empty())
    req.prompt = dump::tokens_from_text(engine->tokenizer(), dump::read_text_file(a.text_file),
                                        a.max_tokens);
  req.chunk = a.chunk;
  req.greedy = a.greedy;
  req.ctx = a.ctx;
  req.threads = a.threads > 0 ? a.threads : ds4::parallel::available_cores();

  std::unique_ptr<dump::TraceFile> trace;
  if (a.trace) {
    dump::ensure_dir(a.out);
    trace = std::make_unique<dump::TraceFile>(a.out + "/trace.bin", a.trace_filter);
  }
  const dump::DumpResult r = dump::evaluate(*engine, req, trace.get());
  dump::write_result(a.out, r, req, a.model);
  if (trace) trace->close();
  std::printf("%zu positions (prompt %zu), n_vocab %lld, last argmax %d", r.fed.size(),
              req.prompt.size(), static_cast<long long>(r.n_vocab),
              dump::argmax({&r.logits[(r.fed.size() - 1) * static_cast<size_t>(r.n_vocab)],
                            static_cast<size_t>(r.n_vocab)}));
  if (trace) std::printf(", %llu trace records", static_cast<unsigned long long>(trace->records()));
  std::printf("\nwrote %s\n", a.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Dump the CPU forward pass's logits (and trace) of a token list, for parity checks",
               "ds4-dump-logits"};
  app.add_option("-m,--model", a.model, "GGUF model")->required();
  app.add_option("--tokens", a.tokens, "Token ids, comma or space separated");
  app.add_option("--tokens-file", a.tokens_file, "File of token ids, comma or space separated");
  app.add_option("--text-file", a.text_file, "Text to tokenize with the model's vocabulary");
  app.add_option("--max-tokens", a.max_tokens, "Keep the first N tokens of --text-file (0 = all)");
  app.add_option("-o,--out", a.out, "Output directory")->required();
  app.add_option("--chunk", a.chunk, "Prompt evaluation chunk in tokens (0 = whole prompt)");
  app.add_option("--greedy", a.greedy, "Greedy tokens to generate after the prompt");
  app.add_option("--ctx", a.ctx, "Context size (0 = prompt + greedy)");
  app.add_option("-t,--threads", a.threads, "CPU threads (0 = all cores)");
  app.add_flag("--trace", a.trace, "Also write DIR/trace.bin with every named intermediate");
  app.add_option("--trace-filter", a.trace_filter,
                 "Only trace names containing one of these substrings")
      ->delimiter(',');
  ds4::parse_or_exit(app, argc, argv);  // usage errors: exit 2
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds4-dump-logits: error: %s\n", e.what());
    return 1;
  }
}
