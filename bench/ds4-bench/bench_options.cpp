#include "bench_options.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "backend/synthetic/synthetic_model.h"
#include "common/cli_checks.h"
#include "common/error.h"
#include "engine/gpu_plan.h"

namespace ds4::bench {

int64_t effective_ctx_alloc(const BenchOptions& o) {
  return o.ctx_alloc > 0 ? o.ctx_alloc : o.ctx_max + o.gen_tokens + 1;
}

std::optional<BenchOptions> parse_bench_options(const std::vector<std::string>& args,
                                                const std::string& default_model) {
  BenchOptions o;
  constexpr int64_t kMaxCtx = int64_t{1} << 30;
  CLI::App app{"ds4-bench — prefill and greedy-decode throughput at context frontiers (CSV).",
               "ds4-bench"};
  app.get_formatter()->column_width(34);
  app.add_option("--prompt-file", o.prompt_file,
                 "Raw benchmark text, sliced at each frontier (one of --prompt-file, --chat-prompt-file "
                 "or --synthetic is required)");
  app.add_option("--chat-prompt-file", o.chat_prompt_file,
                 "Render FILE as one no-thinking chat user message, then slice that");
  app.add_option("--system", o.system, "System prompt for --chat-prompt-file (-sys also works)");
  app.add_option("-m,--model", o.model, "GGUF model file (default: the build's default model, ds4-nano q2)");
  auto* cpu = app.add_flag_callback("--cpu", [&] { o.backend = "cpu"; }, "Use the CPU backend");
  auto* cuda = app.add_flag_callback("--cuda", [&] { o.backend = "cuda"; }, "Use the CUDA backend");
  cpu->excludes(cuda);
  app.add_option("--backend", o.backend, "Backend: auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("-t,--threads", o.threads, "CPU threads (default: all cores)")
      ->check(ds4::whole_number())->check(CLI::Range(1, 4096));
  app.add_flag("--warm-weights", o.warm_weights, "Touch every mapped weight page first");
  app.add_option("--ctx-start", o.ctx_start, "First measured frontier (tokens)")
      ->capture_default_str()
      ->check(ds4::whole_number())->check(CLI::Range(int64_t{1}, kMaxCtx));
  app.add_option("--ctx-max", o.ctx_max, "Last measured frontier (tokens)")
      ->capture_default_str()
      ->check(ds4::whole_number())->check(CLI::Range(int64_t{1}, kMaxCtx));
  app.add_option("--ctx-alloc", o.ctx_alloc, "Allocated context (default: ctx-max + gen-tokens + 1)")
      ->check(ds4::whole_number())->check(CLI::Range(int64_t{1}, kMaxCtx));
  app.add_option("--step-incr", o.step_incr, "Linear step when --step-mul is 1")
      ->capture_default_str()
      ->check(ds4::whole_number())->check(CLI::Range(int64_t{1}, kMaxCtx));
  app.add_option("--step-mul", o.step_mul, "Multiplicative step (>= 1)")
      ->capture_default_str()
      ->check(ds4::number())->check(CLI::Range(1.0, 1e6));
  app.add_option("-n,--gen-tokens,--tokens", o.gen_tokens,
                 "Greedy decode tokens per frontier, EOS excluded (0: prefill only)")
      ->capture_default_str()
      ->check(ds4::whole_number())->check(CLI::Range(int64_t{0}, kMaxCtx));
  app.add_option("--csv", o.csv, "Write the CSV to FILE instead of stdout");
  app.add_option("--repeat", o.repeat, "Best of N timings per frontier (noisy machines)")
      ->capture_default_str()
      ->check(ds4::whole_number())->check(CLI::Range(1, 1000));
  app.add_option("--prefill-chunk", o.prefill_chunk, "Prefill batch in tokens (0: whole interval)")
      ->check(ds4::whole_number())->check(CLI::Range(int64_t{0}, kMaxCtx));
  app.add_option("--memcpy-mib", o.memcpy_mib, "Size of the DRAM memcpy reference (0: skip)")
      ->check(ds4::whole_number())->check(CLI::Range(int64_t{0}, int64_t{1} << 16));
  app.add_option("--synthetic", o.synthetic,
                 "Full-size synthetic model generated in GPU memory: flash-q2, flash-q4 or pro-q2 (--cuda)");
  app.add_option("--seed", o.seed, "Seed of the synthetic weights and prompt")
      ->capture_default_str()->check(ds4::whole_number<uint64_t>());
  app.add_option("--synthetic-layers", o.synthetic_layers,
                 "Generate only the first N layers of the --synthetic model (one that does not fit the GPU; "
                 "per-token rates then cover N layers)")
      ->check(ds4::whole_number());
  std::optional<std::string> gpu_devices, gpu_vram;
  app.add_option("--gpu-devices", gpu_devices,
                 "CUDA devices, e.g. 0,1: --synthetic splits routed experts over them (0,0: two ranks on one GPU)")
      ->check(ds4::non_empty_list("device", "0 or 0,1"));
  app.add_option("--gpu-vram", gpu_vram,
                 "GiB of GPU memory to use at most: one cap, or one per --gpu-devices entry (0 or auto: no cap, "
                 "all free memory; unlike ds4, where 0 means the CPU)");
  app.add_flag("--fill-state", o.fill_state,
               "Decode-only: start each frontier from a random KV state of that length (no prefill, no "
               "prompt file needed; one untimed warm-up step first)");
  app.add_flag("--kernel-profile", o.kernel_profile,
               "CUDA: time each matrix kind's matvec against the device copy bandwidth");

  // -sys is ds4's spelling; CLI11 short options are one character, so rewrite it.
  std::vector<std::string> rev;
  for (const auto& a : args) rev.push_back(a == "-sys" ? "--system" : a);
  std::reverse(rev.begin(), rev.end());
  try {
    app.parse(rev);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    std::string m = CLI::FailureMessage::simple(&app, e);  // CLI11's text, as ds4 and ds4-server print it
    if (!m.empty() && m.back() == '\n') m.pop_back();
    fail("{}", m);
  }

  if (gpu_devices) o.gpu_devices = parse_gpu_devices(*gpu_devices, /*allow_repeats=*/true);
  if (gpu_vram)
    if (const auto caps = parse_gpu_vram(*gpu_vram))
      for (uint64_t b : *caps) o.gpu_vram.push_back(static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0));
  const size_t n_devices = std::max<size_t>(o.gpu_devices.size(), 1);
  if (o.gpu_vram.size() > 1 && o.gpu_vram.size() != n_devices)
    fail("--gpu-vram lists {} caps but {} device{} used (--gpu-devices); give one cap, or one per device",
         o.gpu_vram.size(), n_devices, n_devices == 1 ? " is" : "s are");
  if (!o.gpu_devices.empty() && o.backend != "cuda") fail("--gpu-devices needs the CUDA backend (--cuda)");
  if (o.kernel_profile && o.backend == "cpu") fail("--kernel-profile times CUDA kernels; it needs --cuda");
  if (o.fill_state && o.gen_tokens == 0)
    fail("--fill-state measures decode only; give at least one decode token (-n)");
  if (o.kernel_profile && o.gpu_devices.size() > 1)
    fail("--kernel-profile times one device's matvecs; give at most one --gpu-devices entry");

  const auto check_frontiers = [&] {
    if (o.ctx_start > o.ctx_max)
      fail("--ctx-start ({}) must be <= --ctx-max ({})", o.ctx_start, o.ctx_max);
    if (o.ctx_alloc != 0 && o.ctx_alloc <= o.ctx_max + o.gen_tokens)
      fail("--ctx-alloc ({}) must be greater than ctx-max + gen-tokens ({})", o.ctx_alloc,
           o.ctx_max + o.gen_tokens);
  };
  if (o.synthetic_layers && !o.synthetic) fail("--synthetic-layers needs --synthetic NAME");
  if (o.synthetic) {
    synthetic_spec(o);  // an unknown name or layer count first: the fix to make
    if (o.backend != "cuda") fail("--synthetic needs the CUDA backend (--cuda)");
    if (!o.model.empty()) fail("--synthetic generates the model; do not give -m");
    if (o.prompt_file || o.chat_prompt_file)
      fail("--synthetic uses seeded random token ids as the prompt; do not give a prompt file");
    check_frontiers();
    return o;
  }
  // --fill-state imports random states instead of prefilling: a prompt file is optional there.
  if (o.prompt_file && o.chat_prompt_file)
    fail("give exactly one of --prompt-file or --chat-prompt-file (or --cuda --synthetic NAME)");
  if (!o.prompt_file && !o.chat_prompt_file && !o.fill_state)
    fail("give exactly one of --prompt-file or --chat-prompt-file (or --cuda --synthetic NAME, or --fill-state)");
  if (o.prompt_file || o.chat_prompt_file) {
    const std::string& prompt = o.prompt_file ? *o.prompt_file : *o.chat_prompt_file;
    if (!std::filesystem::is_regular_file(prompt))
      fail("prompt file {} {}", prompt, std::filesystem::exists(prompt) ? "is not a regular file" : "does not exist");
  }
  if (o.model.empty()) o.model = default_model;
  if (!std::filesystem::is_regular_file(o.model))
    fail("model file {} {}", o.model, std::filesystem::exists(o.model) ? "is not a regular file" : "does not exist");
  check_frontiers();
  return o;
}

synth::SyntheticSpec synthetic_spec(const BenchOptions& o) {
  const synth::SyntheticSpec spec = synth::parse_synthetic(o.synthetic.value());
  return o.synthetic_layers ? synth::with_layers(spec, *o.synthetic_layers) : spec;
}

}  // namespace ds4::bench
