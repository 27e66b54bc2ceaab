// ds4-bench: prefill and greedy-decode throughput at context frontiers, written as CSV
// (product-surface §5.3), plus the weight bandwidth a decode step reaches next to this machine's
// memcpy bandwidth. Exit codes: 0 ok, 2 bad input (flags, files, model, prompt too short),
// 1 a failure while measuring.
#include <cstdio>
#include <memory>

#include "backend/cpu/forward.h"
#include "backend/synthetic/synthetic_model.h"
#ifdef DS4_BENCH_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/expert_parallel.h"
#endif
#include "bandwidth.h"
#include "bench_options.h"
#include "chat/render.h"
#include "common/error.h"
#include "common/read_file.h"
#include "csv.h"
#include "engine/engine.h"
#include "frontiers.h"
#include "parallel/thread_pool.h"
#include "sweep.h"
#include "synthetic_shards.h"
#include "tokenizer/special_tokens.h"

#ifndef DS4_DEFAULT_MODEL
#define DS4_DEFAULT_MODEL "ds4flash.gguf"
#endif

namespace {

using ds4::bench::BenchOptions;

/// The fixed token sequence the sweep slices: raw text tokenized as plain text, or the chat
/// rendering of one no-think user message (special tokens recognised).
std::vector<int32_t> prompt_tokens(const ds4::Engine& engine, const BenchOptions& o) {
  if (o.prompt_file) return engine.tokenizer().encode_plain(ds4::read_file(*o.prompt_file));
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
  messages.push_back({{"role", "user"}, {"content", ds4::read_file(*o.chat_prompt_file)}});
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
  std::unique_ptr<ds4::Backend> synthetic;  ///< --synthetic: the backend (engine stays null)
  std::optional<ds4::synth::SyntheticSpec> spec;
  std::vector<int32_t> prompt;
  std::vector<int64_t> frontiers;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> csv{nullptr, &std::fclose};  ///< null: stdout
};

#ifdef DS4_BENCH_CUDA
/// --synthetic with several --gpu-devices: per-rank budgets from each device's free memory
/// (shared evenly by ranks on one device) and the caps, the per-rank plan printed, then the
/// expert-parallel synthetic backend (ds4::Error before any allocation when a share does not fit).
void load_synthetic_expert_parallel(const BenchOptions& o, int64_t ctx, Loaded& l) {
  std::vector<uint64_t> free_b;
  for (int d : o.gpu_devices) {
    const auto [f, total] = ds4::cuda::device_memory(d);
    std::fprintf(stderr, "ds4-bench: GPU %d: %.2f GiB free of %.2f GiB\n", d, f / 1073741824.0, total / 1073741824.0);
    free_b.push_back(f);
  }
  const auto budgets = ds4::bench::rank_budgets(o.gpu_devices, free_b, o.gpu_vram);
  const ds4::bench::SyntheticShardPlan plan = ds4::bench::plan_synthetic_shards(*l.spec, ctx, o.gpu_devices, budgets);
  std::fprintf(stderr, "ds4-bench: synthetic %s, expert parallel:\n%s", l.spec->name.c_str(), plan.describe().c_str());
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  for (const auto& k : plan.shards) ranges.emplace_back(k.expert_begin, k.expert_end);
  l.synthetic = ds4::cuda::make_synthetic_expert_parallel_backend(*l.spec, o.seed, o.gpu_devices, ranges);
}
#endif

/// --synthetic: prints the memory plan, then generates the model in GPU memory (which checks
/// the plan against the free memory and --gpu-vram first); the prompt is seeded random ids.
void load_synthetic(const BenchOptions& o, Loaded& l) {
  l.spec = ds4::bench::synthetic_spec(o);
  const int64_t ctx = ds4::bench::effective_ctx_alloc(o);
#ifdef DS4_BENCH_CUDA
  if (o.gpu_devices.size() > 1) {
    load_synthetic_expert_parallel(o, ctx, l);
  } else {
    const int device = o.gpu_devices.empty() ? 0 : o.gpu_devices[0];
    const double cap = o.gpu_vram.empty() ? 0.0 : o.gpu_vram[0];
    const ds4::synth::MemoryPlan plan = ds4::cuda::synthetic_plan(*l.spec, ctx);
    std::fprintf(stderr, "ds4-bench: synthetic %s memory plan: %s\n", l.spec->name.c_str(), plan.describe().c_str());
    const auto [free_b, total_b] = ds4::cuda::device_memory(device);
    std::fprintf(stderr, "ds4-bench: GPU %d: %.2f GiB free of %.2f GiB%s\n", device, free_b / 1073741824.0,
                 total_b / 1073741824.0, cap > 0 ? fmt::format(", cap --gpu-vram {:.2f} GiB", cap).c_str() : "");
    l.synthetic = ds4::cuda::make_synthetic_backend(
        *l.spec, {.device = device, .seed = o.seed, .ctx = ctx, .gpu_vram_gib = cap});
  }
#else
  (void)ctx;
  ds4::fail("--synthetic {}: this build has no CUDA backend (configured without CUDA: nvcc not found or "
            "-DDS4_CUDA=OFF)", *o.synthetic);
#endif
  l.prompt.resize(static_cast<size_t>(o.ctx_max));
  for (size_t i = 0; i < l.prompt.size(); ++i)
    l.prompt[i] = static_cast<int32_t>(ds4::synth::block_word(o.seed, i, 99) % l.spec->config.n_vocab);
}

/// Everything that depends on user input; its ds4::Error means exit code 2.
Loaded load(const BenchOptions& o) {
  Loaded l;
  l.frontiers = ds4::bench::frontiers(o.ctx_start, o.ctx_max, o.step_incr, o.step_mul);
  if (o.csv) {
    l.csv.reset(std::fopen(o.csv->c_str(), "wb"));
    if (!l.csv) ds4::fail("{}: cannot open for writing", *o.csv);
  }
  if (o.synthetic) {
    load_synthetic(o, l);
    return l;
  }
  std::string devices;
  for (int d : o.gpu_devices) {
    if (!devices.empty()) devices += ',';
    devices += std::to_string(d);
  }
  l.engine = ds4::Engine::open({.model_path = o.model, .backend = o.backend, .threads = o.threads,
                                .gpu_devices = devices,
                                .plan_ctx = ds4::bench::effective_ctx_alloc(o)});
  if (!o.prompt_file && !o.chat_prompt_file) return l;  // --fill-state: no prompt to read
  l.prompt = prompt_tokens(*l.engine, o);
  if (static_cast<int64_t>(l.prompt.size()) < o.ctx_max)
    ds4::fail("the prompt has {} tokens, need at least --ctx-max = {}", l.prompt.size(), o.ctx_max);
  return l;
}

/// The per-matrix-kind matvec table (--kernel-profile): bytes per token, time, GB/s and the
/// fraction of `copy`, the device copy bandwidth (GB/s) run() measured in the same process.
void kernel_profile(ds4::Backend& backend, double copy) {
#ifdef DS4_BENCH_CUDA
  std::fprintf(stderr, "ds4-bench: %-24s %-8s %5s %10s %10s %8s %6s\n", "matvec (per token)", "type", "calls",
               "MB", "us", "GB/s", "copy%");
  double tb = 0, ts = 0;
  for (const auto& r : ds4::cuda::profile_matvecs(backend, 5)) {
    const double gbs = r.bytes / r.seconds / 1e9;
    std::fprintf(stderr, "ds4-bench: %-24s %-8s %5d %10.1f %10.1f %8.0f %5.1f%%\n", r.name.c_str(), r.type.c_str(),
                 r.calls, r.bytes / 1e6, r.seconds * 1e6, gbs, 100.0 * gbs / copy);
    tb += r.bytes;
    ts += r.seconds;
  }
  std::fprintf(stderr, "ds4-bench: %-24s %-8s %5s %10.1f %10.1f %8.0f %5.1f%% (matvec-only ceiling %.0f tok/s)\n",
               "total", "", "", tb / 1e6, ts * 1e6, tb / ts / 1e9, 100.0 * tb / ts / 1e9 / copy, 1.0 / ts);
#else
  (void)backend;
  (void)copy;
  ds4::fail("--kernel-profile needs the CUDA backend");
#endif
}

int run(const BenchOptions& o, Loaded& l) {
  const int threads = o.threads > 0 ? o.threads : ds4::parallel::available_cores();
  const ds4::model::Config& config = l.engine ? l.engine->config() : l.spec->config;
  ds4::Backend& backend = l.engine ? l.engine->backend() : *l.synthetic;
  if (o.warm_weights && l.engine) warm(l.engine->reader());
  const uint64_t weight_bytes =
      l.engine ? ds4::cpu::Forward(config, l.engine->weights(), 1).decode_weight_bytes()
               : ds4::synth::decode_weight_bytes(config, [&](const ds4::model::TensorSpec& s) {
                   return ds4::model::recipe_type(s, l.spec->recipe);
                 });
  std::fprintf(stderr, "ds4-bench: %s, backend %s, %d threads, prompt %zu tokens, ctx %lld\n",
               l.spec ? ("synthetic " + l.spec->name).c_str() : o.model.c_str(), backend.name().c_str(),
               threads, l.prompt.size(), static_cast<long long>(ds4::bench::effective_ctx_alloc(o)));
  double mc_ws = 0;  // the reference bandwidth: host memcpy (CPU) or device copy (CUDA)
  if (backend.name() == "cuda") {
#ifdef DS4_BENCH_CUDA
    const int device = o.gpu_devices.empty() ? 0 : o.gpu_devices[0];  // copy reference: first device
    mc_ws = ds4::cuda::copy_bandwidth_gbps(device, size_t{2} << 30);
#endif
    std::fprintf(stderr, "ds4-bench: a decode step reads %.3f MB of weights; device copy (2 GiB): %.2f GB/s\n",
                 weight_bytes / 1e6, mc_ws);
    if (o.kernel_profile) kernel_profile(backend, mc_ws);
  } else {
    if (o.kernel_profile) ds4::fail("--kernel-profile times CUDA kernels; the backend is {}", backend.name());
    mc_ws = ds4::bench::memcpy_gbps(std::max<uint64_t>(weight_bytes, 4096), threads);
    std::fprintf(stderr,
                 "ds4-bench: a decode step reads %.3f MB of weights; memcpy of that size: %.2f GB/s",
                 weight_bytes / 1e6, mc_ws);
    if (o.memcpy_mib > 0) {
      const double mc_dram = ds4::bench::memcpy_gbps(static_cast<size_t>(o.memcpy_mib) << 20, threads);
      std::fprintf(stderr, ", of %lld MiB: %.2f GB/s", static_cast<long long>(o.memcpy_mib), mc_dram);
    }
    std::fprintf(stderr, " (%d threads)\n", threads);
  }

  std::FILE* out = l.csv ? l.csv.get() : stdout;
  std::fprintf(out, "%s\n", ds4::bench::csv_header().c_str());
  std::fflush(out);

  ds4::bench::SweepSettings s;
  s.ctx_alloc = ds4::bench::effective_ctx_alloc(o);
  s.frontiers = l.frontiers;
  s.gen_tokens = o.gen_tokens;
  s.repeat = o.repeat;
  s.prefill_chunk = o.prefill_chunk;
  if (l.engine) s.excluded = l.engine->tokenizer().find_token(ds4::tok::kEosToken);
  auto on_row = [&](const ds4::bench::FrontierResult& r) {
    std::fprintf(out, "%s\n", ds4::bench::csv_row(r, weight_bytes).c_str());
    std::fflush(out);
    if (r.prefill_tokens > 0)
      std::fprintf(stderr, "ds4-bench: ctx %lld: prefill %lld tokens %.2f tok/s (cpu %.3f s)",
                   static_cast<long long>(r.ctx_tokens), static_cast<long long>(r.prefill_tokens),
                   r.prefill_tokens / r.prefill_s, r.prefill_cpu_s);
    else
      std::fprintf(stderr, "ds4-bench: ctx %lld: no prefill (--fill-state: random state imported)",
                   static_cast<long long>(r.ctx_tokens));
    if (r.gen_tokens > 0) {
      const double tps = r.gen_tokens / r.gen_s;
      std::fprintf(stderr, "; decode %.2f tok/s (cpu %.3f s), weights %.2f GB/s (copy %.2f GB/s)",
                   tps, r.gen_cpu_s, weight_bytes * tps / 1e9, mc_ws);
    }
    std::fputc('\n', stderr);
  };
  if (o.fill_state)
    ds4::bench::run_fill_state_sweep(config, backend, s, o.seed, on_row);
  else
    ds4::bench::run_sweep(config, backend, l.prompt, s, on_row);
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
