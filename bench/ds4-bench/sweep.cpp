#include "sweep.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "engine/session.h"

namespace ds4::bench {
namespace {

/// Wall and process-CPU clocks read together.
struct Stamp {
  std::chrono::steady_clock::time_point wall;
  double cpu;
  static Stamp now() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return {std::chrono::steady_clock::now(), static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9};
  }
};

/// Keeps the minimum wall and CPU time of the runs of one measurement.
struct Best {
  double wall = std::numeric_limits<double>::infinity();
  double cpu = std::numeric_limits<double>::infinity();
  void add(const Stamp& a, const Stamp& b) {
    wall = std::min(wall, std::chrono::duration<double>(b.wall - a.wall).count());
    cpu = std::min(cpu, b.cpu - a.cpu);
  }
};

}  // namespace

int32_t greedy_token(std::span<const float> logits, std::optional<int32_t> excluded) {
  int32_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    if (std::isnan(logits[i]) || (excluded && id == *excluded)) continue;
    if (best < 0 || logits[i] > logits[static_cast<size_t>(best)]) best = id;
  }
  if (best < 0) fail("greedy decode: no token can be chosen from {} logits", logits.size());
  return best;
}

[[gnu::noinline]] void greedy_decode(Session& session, int64_t n, std::optional<int32_t> excluded) {
  for (int64_t i = 0; i < n; ++i) {
    if (session.logits().empty()) fail("greedy decode: the session has no logits (no token yet)");
    if (session.remaining() < 1) fail("greedy decode: the context of {} tokens is full", session.ctx());
    session.decode(greedy_token(session.logits(), excluded));
  }
}

void run_sweep(const model::Config& config, Backend& backend, std::span<const int32_t> prompt,
               const SweepSettings& s, const std::function<void(const FrontierResult&)>& on_row) {
  if (s.frontiers.empty()) fail("the sweep has no frontiers");
  for (size_t i = 0; i < s.frontiers.size(); ++i)
    if (s.frontiers[i] < 1 || (i > 0 && s.frontiers[i] <= s.frontiers[i - 1]))
      fail("frontiers must be positive and increasing (entry {} is {})", i, s.frontiers[i]);
  const int64_t last = s.frontiers.back();
  if (static_cast<int64_t>(prompt.size()) < last)
    fail("the prompt has {} tokens, need at least --ctx-max = {}", prompt.size(), last);
  if (s.gen_tokens < 0) fail("gen_tokens {} must be >= 0", s.gen_tokens);
  if (s.ctx_alloc <= last + s.gen_tokens)
    fail("the context ({}) must exceed ctx-max + gen-tokens ({})", s.ctx_alloc, last + s.gen_tokens);
  if (s.repeat < 1) fail("repeat {} must be >= 1", s.repeat);

  Session session(config, backend, s.ctx_alloc);
  std::vector<uint8_t> previous;  // snapshot at the previous frontier; empty = empty session
  int64_t previous_ctx = 0;
  for (const int64_t frontier : s.frontiers) {
    FrontierResult row;
    row.ctx_tokens = frontier;
    row.prefill_tokens = frontier - previous_ctx;
    const auto prefix = prompt.first(static_cast<size_t>(frontier));

    Best prefill;
    for (int r = 0; r < s.repeat; ++r) {
      if (r > 0) {  // back to the previous frontier (run 0 starts there already)
        if (previous.empty()) session.reset();
        else session.load(previous);
      }
      const Stamp a = Stamp::now();
      session.sync(prefix, s.prefill_chunk);
      prefill.add(a, Stamp::now());
    }
    row.prefill_s = prefill.wall;
    row.prefill_cpu_s = prefill.cpu;

    std::vector<uint8_t> snapshot = session.save();
    row.kvcache_bytes = snapshot.size();
    if (s.gen_tokens > 0) {
      Best gen;
      for (int r = 0; r < s.repeat; ++r) {
        if (r > 0) session.load(snapshot);
        const Stamp a = Stamp::now();
        greedy_decode(session, s.gen_tokens, s.excluded);
        gen.add(a, Stamp::now());
      }
      session.load(snapshot);
      row.gen_tokens = s.gen_tokens;
      row.gen_s = gen.wall;
      row.gen_cpu_s = gen.cpu;
    }
    on_row(row);
    previous = std::move(snapshot);
    previous_ctx = frontier;
  }
}

}  // namespace ds4::bench
