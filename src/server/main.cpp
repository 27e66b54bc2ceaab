// ds4-server: OpenAI chat/completions, OpenAI Responses and Anthropic Messages over one live
// session (product-surface §2.2, §3). Flags follow §2.2; invalid flags exit with code 2.
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <pthread.h>
#include <thread>
#include <unistd.h>

#include "common/cli_checks.h"
#include "common/error.h"
#include "engine/engine.h"
#include "server/core.h"
#include "server/generator.h"
#include "server/http_server.h"
#include "server/kv_disk_cache.h"

namespace {

struct Flags {
  std::string model = DS4_DEFAULT_MODEL;
  std::string backend = "auto";
  std::string gpu_devices, gpu_vram;
  bool cuda_tensor_parallel = false;
  int threads = 0;
  int64_t ctx = 32768;
  int64_t tokens = 393216;
  std::string host = "127.0.0.1";
  int port = 8000;
  bool cors = false;
  std::string api_key;
  size_t max_queue = 0;
  // Disk KV cache (product-surface §2.2, §4).
  std::string kv_disk_dir;
  int64_t kv_disk_space_mb = 4096, kv_min = 512, kv_cold_max = 30000, kv_continued = 10000,
          kv_trim = 32, kv_align = 2048;
  bool kv_reject_quant = false;
  bool disable_exact_replay = false;
  size_t tool_memory_max_ids = 100000;
  std::string trace;
};

Flags parse(int argc, char** argv) {
  Flags f;
  CLI::App app{"ds4-server: OpenAI / Anthropic compatible HTTP server for DeepSeek V4", "ds4-server"};
  app.add_option("-m,--model", f.model, "GGUF model file (default: the build's ds4 model)");
  app.add_option("-c,--ctx", f.ctx, "Context of the live session in tokens")
      ->capture_default_str()
      ->check(ds4::whole_number())->check(CLI::Range(int64_t{16}, int64_t{1} << 30));
  app.add_option("-n,--tokens", f.tokens, "Default max_tokens when a request gives none")
      ->capture_default_str()
      ->check(ds4::whole_number())->check(ds4::at_least(int64_t{1}));
  app.add_option("-t,--threads", f.threads, "CPU threads (default: DS4_THREADS, else all cores)")->check(ds4::whole_number())->check(CLI::Range(1, 4096));
  app.add_option("--gpu-devices", f.gpu_devices, "CUDA devices, e.g. 0,1 (several: experts split across them)")
      ->check(ds4::non_empty_list("device", "0 or 0,1"));
  app.add_option("--gpu-vram", f.gpu_vram, "GPU memory budget per device in GiB (N[,N...]) or auto; 0 = no CUDA");
  app.add_flag("--cuda-tensor-parallel", f.cuda_tensor_parallel,
               "Split the model over --gpu-devices (expert parallel); implied by several devices");
  auto* cpu = app.add_flag_callback("--cpu", [&] { f.backend = "cpu"; }, "Use the CPU backend");
  auto* cuda = app.add_flag_callback("--cuda", [&] { f.backend = "cuda"; }, "Use the CUDA backend");
  cpu->excludes(cuda);
  app.add_option("--backend", f.backend, "Backend: auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--host", f.host, "IPv4 bind address (localhost = 127.0.0.1)")->capture_default_str();
  app.add_option("--port", f.port, "Listen port (0 = any free port)")->capture_default_str()->check(ds4::whole_number())->check(CLI::Range(0, 65535));
  app.add_flag("--cors", f.cors, "Send Access-Control-Allow-* headers");
  app.add_option("--api-key", f.api_key, "Require this key (Authorization: Bearer / x-api-key)");
  app.add_option("--max-queue", f.max_queue, "Answer 429 when N jobs are waiting (0 = no limit)");
  app.add_option("--kv-disk-dir", f.kv_disk_dir, "Enable the disk KV cache in DIR");
  app.add_option("--kv-disk-space-mb", f.kv_disk_space_mb, "Disk cache budget")->check(CLI::PositiveNumber);
  app.add_option("--kv-cache-min-tokens", f.kv_min, "Shortest cached prefix")->check(CLI::PositiveNumber);
  app.add_option("--kv-cache-cold-max-tokens", f.kv_cold_max, "Cold-save prompt length limit")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-cache-continued-interval-tokens", f.kv_continued, "Continued-save spacing")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-cache-boundary-trim-tokens", f.kv_trim, "Tail trimmed before cold saves")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-cache-boundary-align-tokens", f.kv_align, "Save boundary alignment")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--kv-cache-reject-different-quant", f.kv_reject_quant,
               "Refuse checkpoints of another expert quantization");
  app.add_flag("--disable-exact-dsml-tool-replay", f.disable_exact_replay,
               "Always render tool-call history canonically from JSON");
  app.add_option("--tool-memory-max-ids", f.tool_memory_max_ids,
                 "Tool-call ids remembered for exact DSML replay (LRU; 512 MiB cap)")
      ->check(CLI::PositiveNumber);
  app.add_option("--trace", f.trace, "Append a human-readable trace of every job to FILE");
  ds4::parse_or_exit(app, argc, argv);
  if (f.kv_cold_max != 0 && f.kv_cold_max < f.kv_min) {
    std::fprintf(stderr, "ds4-server: --kv-cache-cold-max-tokens must be 0 or >= --kv-cache-min-tokens\n");
    std::exit(2);
  }
  if (f.threads == 0) f.threads = ds4::threads_from_env("ds4-server");
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parse(argc, argv);
  // SIGINT/SIGTERM are taken by a dedicated thread (sigwait): every other thread blocks them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  try {
    auto engine = ds4::Engine::open({.model_path = f.model, .backend = f.backend, .threads = f.threads,
                                     .gpu_devices = f.gpu_devices, .gpu_vram = f.gpu_vram,
                                     .plan_ctx = f.ctx, .cuda_tensor_parallel = f.cuda_tensor_parallel});
    std::unique_ptr<ds4::server::KvDiskCache> cache;
    if (!f.kv_disk_dir.empty()) {
      // Routed-expert quantization recorded in each snapshot: 2-bit formats vs everything else.
      const auto t = engine->weights().layers.at(0).ffn_gate_exps.type;
      const bool two = t == ds4::GgmlType::Q2_K || t == ds4::GgmlType::IQ2_XXS ||
                       t == ds4::GgmlType::IQ2_XS || t == ds4::GgmlType::IQ2_S;
      cache = std::make_unique<ds4::server::KvDiskCache>(ds4::server::KvCacheOptions{
          .dir = f.kv_disk_dir,
          .budget_bytes = static_cast<uint64_t>(f.kv_disk_space_mb) << 20,
          .min_tokens = f.kv_min,
          .cold_max_tokens = f.kv_cold_max,
          .reject_different_quant = f.kv_reject_quant,
          .quant_bits = static_cast<uint8_t>(two ? 2 : 4),
          .ctx = f.ctx});
    }
    std::unique_ptr<ds4::server::ToolMemory> tools;
    if (!f.disable_exact_replay)
      tools = std::make_unique<ds4::server::ToolMemory>(
          ds4::server::ToolMemoryLimits{.max_ids = f.tool_memory_max_ids});
    std::FILE* trace = nullptr;
    if (!f.trace.empty()) {
      trace = std::fopen(f.trace.c_str(), "a");
      if (!trace) ds4::fail("--trace {}: cannot open for appending", f.trace);
      std::setvbuf(trace, nullptr, _IONBF, 0);
    }
    ds4::server::ServerInfo info;
    info.tool_memory = tools.get();
    info.kv_disk_dir = f.kv_disk_dir;
    info.tokenizer = &engine->tokenizer();
    info.ctx = f.ctx;
    info.default_max_tokens = f.tokens;
    ds4::server::Core core(
        std::make_unique<ds4::server::ModelGenerator>(
            *engine, f.ctx, engine->prefill_chunk(), cache.get(),
            ds4::server::KvPlacement{.cold_max_tokens = f.kv_cold_max, .trim_tokens = f.kv_trim,
                                     .align_tokens = f.kv_align, .continued_tokens = f.kv_continued},
            tools.get()),
        {.max_queue = f.max_queue, .tool_memory = tools.get(), .trace = trace});
    ds4::server::HttpServer http(core, info, {.host = f.host, .port = f.port, .cors = f.cors,
                                              .api_key = f.api_key, .max_body_bytes = 64u << 20,
                                              .threads = 64});
    http.bind();
    std::fprintf(stderr, "ds4-server: %s, ctx %lld, listening on http://%s:%d\n", f.model.c_str(),
                 static_cast<long long>(f.ctx), f.host == "localhost" ? "127.0.0.1" : f.host.c_str(),
                 http.port());
    std::fflush(stderr);
    std::thread sig_thread([&] {
      int sig = 0;
      sigwait(&signals, &sig);
      std::fprintf(stderr, "ds4-server: signal %d, shutting down\n", sig);
      std::thread second([&] {
        int s2 = 0;
        sigwait(&signals, &s2);
        _exit(130);
      });
      second.detach();
      core.shutdown();
      http.stop();
    });
    const bool ok = http.run();
    if (!ok && !core.shutting_down()) {
      std::fprintf(stderr, "ds4-server: the listener failed\n");
      std::_Exit(1);
    }
    sig_thread.join();
    std::fprintf(stderr, "ds4-server: stopped\n");
    return 0;
  } catch (const ds4::Error& e) {
    std::fprintf(stderr, "ds4-server: %s\n", e.what());
    return 1;
  }
}
