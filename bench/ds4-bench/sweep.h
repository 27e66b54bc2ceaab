// The ds4-bench measurement loop (product-surface §5.3): for each context frontier, an
// incremental Session::sync of the fixed prompt up to the frontier (timed: prefill), an
// in-memory snapshot (Session::save), a greedy decode of gen_tokens tokens with one token id
// excluded (timed: decode), and a restore of the snapshot (Session::load) before moving on.
// Snapshot and restore are outside both timing windows.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "engine/backend.h"
#include "model/config.h"
#include "model/kv_state.h"

namespace ds4 {
class Session;
}

namespace ds4::bench {

/// What to measure.
struct SweepSettings {
  int64_t ctx_alloc = 0;              ///< session context (tokens); > last frontier + gen_tokens
  std::vector<int64_t> frontiers;     ///< strictly increasing, >= 1 (bench/frontiers.h)
  int64_t gen_tokens = 0;             ///< greedy decode steps per frontier (0 = prefill only)
  int repeat = 1;                     ///< each timing is the best of `repeat` runs (>= 1)
  int64_t prefill_chunk = 0;          ///< Session::prefill chunk; 0 = the whole interval
  std::optional<int32_t> excluded;    ///< token never chosen by the greedy decode (EOS)
};

/// One CSV row. Times are seconds; `*_s` is wall time, `*_cpu_s` the process CPU time (all
/// threads) of the same interval. With repeat > 1 each is the minimum over the runs.
struct FrontierResult {
  int64_t ctx_tokens = 0;       ///< the frontier
  int64_t prefill_tokens = 0;   ///< tokens prefilled since the previous frontier
  double prefill_s = 0, prefill_cpu_s = 0;
  int64_t gen_tokens = 0;       ///< decode steps timed
  double gen_s = 0, gen_cpu_s = 0;
  uint64_t kvcache_bytes = 0;   ///< size of the snapshot payload at the frontier (bytes)
};

/// Greedy choice: the id of the largest logit, ties to the lowest id, NaN entries and
/// `excluded` never chosen. Throws ds4::Error when no entry can be chosen.
int32_t greedy_token(std::span<const float> logits, std::optional<int32_t> excluded);

/// Appends `n` greedily chosen tokens (greedy_token of the current logits, `excluded` never
/// chosen) to `session`, one decode step each. Kept out of line so a profiler can select the
/// decode phase alone (valgrind --tool=callgrind --collect-atstart=no
/// --toggle-collect='ds4::bench::greedy_decode*'). Throws ds4::Error when the session has no
/// logits yet, is full, or as Session::decode does.
void greedy_decode(Session& session, int64_t n, std::optional<int32_t> excluded);

/// Runs the sweep over `prompt` (token ids; at least as many as the last frontier) on a fresh
/// session of `backend`, calling `on_row` after each frontier. Throws ds4::Error for settings
/// that cannot run (no frontiers, not increasing, prompt too short, ctx_alloc too small,
/// repeat < 1) and whatever the session throws.
void run_sweep(const model::Config& config, Backend& backend, std::span<const int32_t> prompt,
               const SweepSettings& settings,
               const std::function<void(const FrontierResult&)>& on_row);

/// The state of a session of `ctx` tokens that has consumed `n` tokens (0 < n < ctx), with
/// seeded random contents of the real shapes (spec §4.1): every raw ring row, n / R compressed
/// (and, for R = 4, indexer) rows per compressed layer, full compressor frontiers with scores
/// that weight every row, all values uniform in [-1.7, 1.7) (rms ~1, like RMS-normed rows)
/// rounded to f16 as stored rows are. For decode measurements at long contexts without a
/// token-by-token prefill (ds4-bench --fill-state). Throws ds4::Error for n outside (0, ctx).
model::KvState random_state(const model::Config& config, int64_t ctx, int64_t n, uint64_t seed);

/// Decode-only sweep (ds4-bench --fill-state): for each frontier a fresh backend session of
/// ctx_alloc tokens imports random_state(frontier), takes one untimed decode step (a session's
/// first step may capture a CUDA graph), imports the state again and times gen_tokens greedy
/// decode steps (BackendSession::eval one token at a time, greedy_token with nothing excluded;
/// with repeat > 1 each run re-imports the state). Rows
/// report prefill_tokens 0 and the state's f32 bytes as kvcache_bytes. Throws ds4::Error for
/// the settings run_sweep rejects (without the prompt) and gen_tokens < 1.
void run_fill_state_sweep(const model::Config& config, Backend& backend, const SweepSettings& settings,
                          uint64_t seed, const std::function<void(const FrontierResult&)>& on_row);

}  // namespace ds4::bench
