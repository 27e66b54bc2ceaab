// ds4-bench: prefill and greedy-decode throughput at context frontiers, written as CSV
// (product-surface §5.3), plus the weight bandwidth a decode step reaches next to this machine's
// memcpy bandwidth. Exit codes: 0 ok, 2 bad input (flags, files, model, prompt too short),
// 1 a failure while measuring.
#include <omp.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "backend/cpu/forward.h"
#include "bandwidth.h"
#include "bench_options.h"
#include "chat/render.h"
#include "common/error.h"
#include "csv.h"
#include "engine/engine.h"
#include "frontiers.h"
#include "sweep.h"
#include "tokenizer/special_tokens.h"

#ifndef DS4_DEFAULT_MODEL
#define DS4_DEFAULT_MODEL "ds4flash.gguf"
#endif

namespace {

using ds4::bench::BenchOptions;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) ds4::fail("{}: cannot open", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// The fixed token sequence the sweep slices: raw text tokenized as plain text, or the chat
/// rendering of one no-think user message (special tokens recognised).
std::vector<int32_t> prompt_tokens(const ds4::Engine& engine, const BenchOptions& o) {
  if (o.prompt_file) return engine.tokenizer().encode_plain(read_file(*o.prompt_file));
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
  messages.push_back({{"role", "user"}, {"content", read_file(*o.chat_prompt_file)}});
  ds4::chat::RenderOptions ro;
  ro.think_mode = ds4::chat::ThinkMode::chat;
  return engine.tokenizer().encode_with_specials(ds4::chat::render_prompt(messages, ro));
}

/// Reads one byte of every page of the mapped model so the first frontier does not pay the
/// page faults (ds4's --warm-weights).
void warm(const ds4::gguf::Reader& reader) {
  const auto bytes = reader.bytes();
  unsigned sum = 0;
  for (size_t i = 0; i < bytes.size(); i += 4096) sum += bytes[i];
  volatile unsigned sink = sum;
  (void)sink;
}

struct Loaded {
  std::unique_ptr<ds4::Engine> engine;
  std::vector<int32_t> prompt;
  std::vector<int64_t> frontiers;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> csv{nullptr, &std::fclose};  ///< null: stdout
};

/// Everything that depends on user input; its ds4::Error means exit code 2.
Loaded load(const BenchOptions& o) {
  if (o.backend == "cuda") ds4::fail("the CUDA backend is not available in this build (use --cpu)");
  Loaded l;
  l.frontiers = ds4::bench::frontiers(o.ctx_start, o.ctx_max, o.step_incr, o.step_mul);
  l.engine = ds4::Engine::open({.model_path = o.model, .backend = "cpu", .threads = o.threads});
  l.prompt = prompt_tokens(*l.engine, o);
  if (static_cast<int64_t>(l.prompt.size()) < o.ctx_max)
    ds4::fail("the prompt has {} tokens, need at least --ctx-max = {}", l.prompt.size(), o.ctx_max);
  if (o.csv) {
    l.csv.reset(std::fopen(o.csv->c_str(), "wb"));
    if (!l.csv) ds4::fail("{}: cannot open for writing", *o.csv);
  }
  return l;
}

int run(const BenchOptions& o, Loaded& l) {
  ds4::Engine& engine = *l.engine;
  const int threads = o.threads > 0 ? o.threads : omp_get_num_procs();
  if (o.warm_weights) warm(engine.reader());
  const uint64_t weight_bytes =
      ds4::cpu::Forward(engine.config(), engine.weights(), 1).decode_weight_bytes();

  std::fprintf(stderr, "ds4-bench: %s, backend %s, %d threads, prompt %zu tokens, ctx %lld\n",
               o.model.c_str(), engine.backend().name().c_str(), threads, l.prompt.size(),
               static_cast<long long>(ds4::bench::effective_ctx_alloc(o)));
  const double mc_ws = ds4::bench::memcpy_gbps(std::max<uint64_t>(weight_bytes, 4096), threads);
  std::fprintf(stderr,
               "ds4-bench: a decode step reads %.3f MB of weights; memcpy of that size: %.2f GB/s",
               weight_bytes / 1e6, mc_ws);
  if (o.memcpy_mib > 0) {
    const double mc_dram = ds4::bench::memcpy_gbps(static_cast<size_t>(o.memcpy_mib) << 20, threads);
    std::fprintf(stderr, ", of %lld MiB: %.2f GB/s", static_cast<long long>(o.memcpy_mib), mc_dram);
  }
  std::fprintf(stderr, " (%d threads)\n", threads);

  std::FILE* out = l.csv ? l.csv.get() : stdout;
  std::fprintf(out, "%s\n", ds4::bench::csv_header().c_str());
  std::fflush(out);

  ds4::bench::SweepSettings s;
  s.ctx_alloc = ds4::bench::effective_ctx_alloc(o);
  s.frontiers = l.frontiers;
  s.gen_tokens = o.gen_tokens;
  s.repeat = o.repeat;
  s.prefill_chunk = o.prefill_chunk;
  s.excluded = engine.tokenizer().find_token(ds4::tok::kEosToken);
  ds4::bench::run_sweep(engine.config(), engine.backend(), l.prompt, s,
                        [&](const ds4::bench::FrontierResult& r) {
    std::fprintf(out, "%s\n", ds4::bench::csv_row(r, weight_bytes).c_str());
    std::fflush(out);
    std::fprintf(stderr,
                 "ds4-bench: ctx %lld: prefill %lld tokens %.2f tok/s (cpu %.3f s)",
                 static_cast<long long>(r.ctx_tokens), static_cast<long long>(r.prefill_tokens),
                 r.prefill_tokens / r.prefill_s, r.prefill_cpu_s);
    if (r.gen_tokens > 0) {
      const double tps = r.gen_tokens / r.gen_s;
      std::fprintf(stderr, "; decode %.2f tok/s (cpu %.3f s), weights %.2f GB/s (memcpy %.2f GB/s)",
                   tps, r.gen_cpu_s, weight_bytes * tps / 1e9, mc_ws);
    }
    std::fputc('\n', stderr);
  });
  if (l.csv && std::fclose(l.csv.release()) != 0) ds4::fail("{}: write failed", *o.csv);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<BenchOptions> o;
  Loaded loaded;
  try {
    o = ds4::bench::parse_bench_options(std::vector<std::string>(argv + 1, argv + argc),
                                        DS4_DEFAULT_MODEL);
    if (!o) return 0;  // --help
    loaded = load(*o);
  } catch (const ds4::Error& e) {
    std::fprintf(stderr, "ds4-bench: %s\n", e.what());
    return 2;
  }
  try {
    return run(*o, loaded);
  } catch (const ds4::Error& e) {
    std::fprintf(stderr, "ds4-bench: %s\n", e.what());
    return 1;
  }
}
