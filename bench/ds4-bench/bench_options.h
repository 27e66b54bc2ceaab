// Command-line options of `ds4-bench`, compatible with ds4's (product-surface §5.3): input
// (--prompt-file | --chat-prompt-file, -sys), model/backend (-m, --cpu/--cuda/--backend, -t,
// --warm-weights), sweep (--ctx-start, --ctx-max, --ctx-alloc, --step-incr, --step-mul),
// generation (--gen-tokens/--tokens/-n) and output (--csv). ds4-bench extras: --repeat (best of
// N per frontier, for noisy shared machines), --prefill-chunk, --memcpy-mib, and for the CUDA
// backend --synthetic NAME (a full-size model generated in GPU memory, seeded random token ids
// as the prompt; --gpu-devices 0,1 splits its routed experts over several GPUs), --seed,
// --gpu-vram GiB[,GiB...] (memory caps) and --kernel-profile (per-matrix-kind
// matvec bandwidth against the measured device copy bandwidth), and --fill-state (decode at each
// frontier from an imported random state of that length instead of a token-by-token prefill).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/synthetic/synthetic_model.h"

namespace ds4::bench {

/// Everything ds4-bench was asked to do. Filled and validated by parse_bench_options().
struct BenchOptions {
  std::string model;                            ///< -m; empty = the build's default model
  std::optional<std::string> prompt_file;       ///< raw benchmark text
  std::optional<std::string> chat_prompt_file;  ///< one no-think chat user message
  std::string system = "You are a helpful assistant.";  ///< -sys, only with chat_prompt_file
  std::string backend = "auto";                 ///< auto | cpu | cuda
  int threads = 0;                              ///< CPU threads; 0 = all cores
  bool warm_weights = false;                    ///< touch every mapped page before measuring
  int64_t ctx_start = 2048;                     ///< first frontier (tokens)
  int64_t ctx_max = 32768;                      ///< last frontier (tokens)
  int64_t ctx_alloc = 0;                        ///< session context; 0 = ctx_max + gen_tokens + 1
  int64_t step_incr = 2048;                     ///< additive step when step_mul == 1
  double step_mul = 1.0;                        ///< multiplicative step (>= 1)
  int64_t gen_tokens = 128;                     ///< greedy decode tokens per frontier (0 = none)
  std::optional<std::string> csv;               ///< CSV file; stdout when absent
  int repeat = 1;                               ///< timings per frontier are the best of N runs
  int64_t prefill_chunk = 0;                    ///< prefill batch size; 0 = the whole interval
  int64_t memcpy_mib = 256;                     ///< size of the DRAM memcpy reference; 0 = skip
  std::optional<std::string> synthetic;         ///< synthetic model: flash-q2, flash-q4, pro-q2 (CUDA)
  uint64_t seed = 1;                            ///< synthetic weights and prompt seed
  std::optional<uint32_t> synthetic_layers;     ///< --synthetic-layers: the model's first N layers only
  std::vector<int> gpu_devices;                 ///< --gpu-devices; empty = device 0 alone. With
                                                ///< --synthetic and 2+ entries: expert parallel
                                                ///< (repeats = ranks sharing a GPU); with -m:
                                                ///< passed to Engine::open (distinct devices)
  std::vector<double> gpu_vram;                 ///< --gpu-vram caps in GiB: none, one for every
                                                ///< device, or one per --gpu-devices entry; 0 =
                                                ///< no cap (all free memory)
  bool kernel_profile = false;                  ///< print the per-kernel roofline table (CUDA)
  bool fill_state = false;                      ///< decode-only: import a random state per frontier
};

/// Parses ds4-bench's arguments (argv[1..argc) ; `-sys` is accepted for --system) and validates
/// them. Returns std::nullopt after printing the help for -h/--help. Throws ds4::Error with a
/// complete message for an unknown flag, a malformed or out-of-range number, a missing model or
/// prompt file, not exactly one of --prompt-file/--chat-prompt-file (at most one with
/// --fill-state, which reads none when neither is given), --ctx-start > --ctx-max,
/// --ctx-alloc <= ctx-max + gen-tokens, --synthetic without --cuda, an unknown synthetic name,
/// --synthetic with -m or a prompt file, --synthetic-layers without --synthetic or outside the
/// model's 1..n_layer, a bad --gpu-devices list (repeats are allowed), a
/// negative or malformed --gpu-vram, --gpu-vram with more than one cap but not one per
/// --gpu-devices entry, --gpu-devices without --cuda, and --kernel-profile with several
/// devices. Does not open the model.
std::optional<BenchOptions> parse_bench_options(const std::vector<std::string>& args,
                                                const std::string& default_model);

/// The session context the sweep allocates: options.ctx_alloc, or ctx_max + gen_tokens + 1.
int64_t effective_ctx_alloc(const BenchOptions& options);

/// The --synthetic model of validated options `o` (its name resolved, cut to --synthetic-layers
/// when given). Throws ds4::Error as parse_synthetic / with_layers do. Requires o.synthetic.
synth::SyntheticSpec synthetic_spec(const BenchOptions& o);

}  // namespace ds4::bench
