#include "sweep.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "common/f16.h"
#include "engine/sampler.h"
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
  return Sampler::argmax(logits, excluded.value_or(-1));
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

namespace {

/// splitmix64 of (seed, i): uniform in [-1.7, 1.7), rounded to f16.
float random_row_value(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const double u = static_cast<double>(z >> 11) * 0x1.0p-53 * 2.0 - 1.0;
  return round_f16(static_cast<float>(1.7 * u));
}

void fill(std::vector<float>& v, uint64_t seed) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = random_row_value(seed, i);
}

}  // namespace

model::KvState random_state(const model::Config& c, int64_t ctx, int64_t n, uint64_t seed) {
  if (n <= 0 || n >= ctx) fail("random state: {} tokens must be in (0, ctx = {})", n, ctx);
  model::KvState s(c, ctx);
  uint64_t k = seed * 0x100000001b3ull;
  for (uint32_t il = 0; il < c.n_layer; ++il) {
    model::LayerKv& L = s.layers()[il];
    fill(L.raw, ++k);
    if (!L.ratio) continue;
    const auto rows = static_cast<size_t>(n / L.ratio);
    L.comp.resize(rows * c.head_dim);
    fill(L.comp, ++k);
    std::vector<float> kv(L.comp_state->state_kv().size()), sc(kv.size());
    fill(kv, ++k);
    fill(sc, ++k);
    L.comp_state->restore(kv, sc, static_cast<uint32_t>(n));
    if (L.ratio != 4) continue;
    L.index.resize(rows * c.indexer_head_dim);
    fill(L.index, ++k);
    kv.assign(L.index_state->state_kv().size(), 0.0f);
    sc.assign(kv.size(), 0.0f);
    fill(kv, ++k);
    fill(sc, ++k);
    L.index_state->restore(kv, sc, static_cast<uint32_t>(n));
  }
  return s;
}

void run_fill_state_sweep(const model::Config& config, Backend& backend, const SweepSettings& s,
                          uint64_t seed, const std::function<void(const FrontierResult&)>& on_row) {
  if (s.frontiers.empty()) fail("the sweep has no frontiers");
  for (size_t i = 0; i < s.frontiers.size(); ++i)
    if (s.frontiers[i] < 1 || (i > 0 && s.frontiers[i] <= s.frontiers[i - 1]))
      fail("frontiers must be positive and increasing (entry {} is {})", i, s.frontiers[i]);
  if (s.gen_tokens < 1) fail("--fill-state needs at least one decode token (gen_tokens {})", s.gen_tokens);
  if (s.ctx_alloc <= s.frontiers.back() + s.gen_tokens)
    fail("the context ({}) must exceed ctx-max + gen-tokens ({})", s.ctx_alloc, s.frontiers.back() + s.gen_tokens);
  if (s.repeat < 1) fail("repeat {} must be >= 1", s.repeat);
  std::vector<float> logits(config.n_vocab);
  for (const int64_t frontier : s.frontiers) {
    const model::KvState state = random_state(config, s.ctx_alloc, frontier, seed + static_cast<uint64_t>(frontier));
    FrontierResult row;
    row.ctx_tokens = frontier;
    for (const model::LayerKv& L : state.layers())
      row.kvcache_bytes += 4 * (L.raw.size() + L.comp.size() + L.index.size());
    auto session = backend.new_session(s.ctx_alloc);
    const auto first = static_cast<int32_t>((seed * 2654435761u + static_cast<uint64_t>(frontier)) % config.n_vocab);
    // One untimed step first: a session's first step can build per-session state (the CUDA
    // graph's capture and instantiation) while the device leaves its idle clocks; every timed
    // run below starts again from the imported state.
    session->import_state(state);
    session->eval({&first, 1}, frontier, logits, {});
    Best gen;
    for (int r = 0; r < s.repeat; ++r) {
      session->import_state(state);
      int32_t tok = first;
      const Stamp a = Stamp::now();
      for (int64_t i = 0; i < s.gen_tokens; ++i) {
        session->eval({&tok, 1}, frontier + i, logits, {});
        tok = greedy_token(logits, std::nullopt);
      }
      gen.add(a, Stamp::now());
    }
    row.gen_tokens = s.gen_tokens;
    row.gen_s = gen.wall;
    row.gen_cpu_s = gen.cpu;
    on_row(row);
  }
}

}  // namespace ds4::bench
