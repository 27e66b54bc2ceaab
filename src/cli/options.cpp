#include "cli/options.h"

#include <CLI/CLI.hpp>

#include <cstdlib>

#include "common/cli_checks.h"

namespace ds4::cli {

Options parse_options(int argc, char** argv) {
  Options o;
  CLI::App app{"ds4 — DeepSeek V4 inference. Without -p/--prompt-file: interactive chat.", "ds4"};
  app.get_formatter()->column_width(34);
  app.add_option("-m,--model", o.model, "GGUF model file (default: " DS4_DEFAULT_MODEL ")");
  app.add_option("-p,--prompt", o.prompt, "One-shot prompt");
  app.add_option("--prompt-file", o.prompt_file, "One-shot prompt read from FILE")
      ->check(CLI::ExistingFile);
  app.add_option("--system", o.system, "System prompt (-sys also works); \"\" disables it");
  app.add_option("-n,--tokens", o.max_tokens, "Maximum generated tokens (generation also stops when the --ctx context is full)")
      ->capture_default_str()
      ->check(ds4::whole_number())->check(ds4::at_least(int64_t{1}));
  app.add_option("-c,--ctx", o.ctx, "Context size in tokens")
      ->capture_default_str()
      ->check(ds4::whole_number())->check(CLI::Range(int64_t{16}, int64_t{1} << 30));
  app.add_option("--temp", o.sampling.temperature, "Temperature (0 = greedy)")
      ->capture_default_str()
      ->check(ds4::number())->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--top-k", o.sampling.top_k, "Keep the K most likely tokens (0 = all)")
      ->capture_default_str()
      ->check(ds4::whole_number())->check(CLI::Range(0, 1 << 30));
  app.add_option("--top-p", o.sampling.top_p, "Nucleus sampling")
      ->capture_default_str()->check(ds4::number())->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--min-p", o.sampling.min_p, "Min-p filter")
      ->capture_default_str()->check(ds4::number())->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--seed", o.sampling.seed, "Sampling seed, >= 1 (default: time based)")
      ->check(ds4::whole_number<uint64_t>())->check(CLI::Range(uint64_t{1}, UINT64_MAX));
  auto* think = app.add_flag_callback("--think", [&] { o.think = ThinkFlag::think; },
                                      "Thinking mode (default)");
  auto* nothink = app.add_flag_callback("--nothink", [&] { o.think = ThinkFlag::nothink; },
                                        "Answer without thinking");
  auto* think_max = app.add_flag_callback("--think-max", [&] { o.think = ThinkFlag::think_max; },
                                          "Think Max (needs ctx >= 393216)");
  think->excludes(nothink)->excludes(think_max);
  nothink->excludes(think_max);
  app.add_option("-t,--threads", o.threads, "CPU threads (default: DS4_THREADS, else all cores)")
      ->check(ds4::whole_number())->check(CLI::Range(1, 4096));
  auto* cpu = app.add_flag_callback("--cpu", [&] { o.backend = "cpu"; }, "Use the CPU backend");
  auto* cuda = app.add_flag_callback("--cuda", [&] { o.backend = "cuda"; }, "Use the CUDA backend");
  cpu->excludes(cuda);
  app.add_option("--backend", o.backend, "Backend: auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--gpu-devices", o.gpu_devices,
                 "CUDA devices to use, e.g. 0,1 (several: routed experts split across them)")
      ->check(ds4::non_empty_list("device", "0 or 0,1"));
  app.add_option("--gpu-vram", o.gpu_vram,
                 "GPU memory budget per device in GiB (N[,N...]) or auto; the plan is printed and "
                 "refused when the model does not fit; 0 = do not use CUDA");
  app.add_flag("--cuda-tensor-parallel", o.cuda_tensor_parallel,
               "Split the model over --gpu-devices (expert parallel: experts split, attention "
               "replicated); implied by listing several devices");
  app.add_flag("--raw-prompt", o.raw_prompt,
               "Use the prompt text as-is (special tokens such as <｜User｜> are recognised) instead "
               "of rendering it through the chat template; for completion-style prompts");
  app.add_flag("--dump-tokens", o.dump_tokens, "Print the prompt's token ids and pieces, then exit");
  app.add_option("--dump-logprobs", o.dump_logprobs,
                 "Greedy continuation with top-k alternatives, written as JSON to FILE");
  app.add_option("--logprobs-top-k", o.logprobs_top_k, "Alternatives per step for --dump-logprobs")
      ->capture_default_str()
      ->check(ds4::whole_number())->check(CLI::Range(1, 128));
  app.add_option("--render-chat", o.render_chat,
                 "Print the exact prompt text for a messages JSON file, then exit")
      ->check(CLI::ExistingFile);
  app.add_option("--think-mode", o.think_mode, "Mode for --render-chat: thinking, chat or max")
      ->check(CLI::IsMember({"thinking", "chat", "max"}));
  app.add_flag("--inspect", o.inspect, "Load the model, print a summary and exit");
  app.add_option("--perplexity-file", o.perplexity_file,
                 "Score raw text with teacher-forced NLL (first 32 tokens unscored)")
      ->check(CLI::ExistingFile);

  // -sys is ds4's spelling; CLI11 short options are one character, so rewrite it.
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(std::string(argv[i]) == "-sys" ? "--system" : argv[i]);
  std::reverse(args.begin(), args.end());
  parse_or_exit(app, args);
  if (o.prompt && o.prompt_file) {
    std::fprintf(stderr, "ds4: give either -p/--prompt or --prompt-file, not both\n");
    std::exit(2);
  }
  if (o.perplexity_file && (o.prompt || o.prompt_file)) {
    std::fprintf(stderr, "ds4: --perplexity-file does not use -p/--prompt-file\n");
    std::exit(2);
  }
  if (o.threads == 0) o.threads = threads_from_env("ds4");
  return o;
}

}  // namespace ds4::cli
