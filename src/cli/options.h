// Command-line options of the `ds4` binary, compatible with ds4's flags (product-surface §2.1).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace ds4::cli {

enum class ThinkFlag { think, nothink, think_max };

/// Everything `ds4` was asked to do. Filled by parse_options().
struct Options {
  std::string model;                 ///< GGUF path; empty = the embedded default model
  std::optional<std::string> prompt; ///< -p
  std::optional<std::string> prompt_file;
  std::string system = "You are a helpful assistant";
  int64_t max_tokens = 50000;        ///< -n / --tokens
  int64_t ctx = 32768;               ///< -c / --ctx (tokens)
  SamplerSettings sampling;
  ThinkFlag think = ThinkFlag::think;
  int threads = 0;                   ///< 0 = all cores (or DS4_THREADS)
  std::string backend = "auto";      ///< auto | cpu | cuda
  std::string gpu_devices;           ///< --gpu-devices LIST (ds4::parse_gpu_devices)
  std::string gpu_vram;              ///< --gpu-vram auto|GiB[,GiB...] (ds4::parse_gpu_vram)
  bool cuda_tensor_parallel = false; ///< --cuda-tensor-parallel (implied by several devices)
  bool raw_prompt = false;           ///< --raw-prompt: tokenize the prompt as-is, no chat template
  bool dump_tokens = false;
  std::optional<std::string> dump_logprobs;
  int logprobs_top_k = 20;
  std::optional<std::string> render_chat;  ///< messages JSON file
  std::string think_mode = "thinking";     ///< for --render-chat: thinking | chat | max
  bool inspect = false;
  std::optional<std::string> perplexity_file;  ///< --perplexity-file: score raw text, then exit
};

/// Parses argv. On --help prints usage and exits 0; on a bad flag or value prints a clear
/// message and exits 2 (ds4's convention). `-sys` is accepted as an alias of --system.
Options parse_options(int argc, char** argv);

}  // namespace ds4::cli
