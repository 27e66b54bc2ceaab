#include "backend/cpu/parallel_steps.h"

#include <algorithm>

#include "common/error.h"
#include "model/attention.h"
#include "model/indexer.h"
#include "parallel/thread_pool.h"

namespace ds4::cpu {
namespace {

// About what one core does in the few microseconds a parallel region's fork/join costs (the same
// rule as cpu::matmul_threads).
constexpr uint64_t kMinMacsPerThread = uint64_t{1} << 15;

}  // namespace

int step_threads(uint64_t macs, uint64_t items, int threads) {
  const uint64_t cap = std::min<uint64_t>({macs / kMinMacsPerThread, items,
                                           static_cast<uint64_t>(std::max(threads, 1))});
  return static_cast<int>(std::max<uint64_t>(cap, 1));
}

void attention_heads(std::span<const float> q, std::span<const float> sinks,
                     std::span<const float* const> rows, std::span<float> out,
                     std::vector<float>& scratch, int threads) {
  const size_t n_head = sinks.size(), n_rows = rows.size();
  if (scratch.size() < n_rows) scratch.resize(n_rows);
  if (n_head == 0 || q.size() % n_head != 0) {  // let sink_attention report the problem
    model::sink_attention(q, sinks, rows, out, scratch);
    return;
  }
  const size_t dim = q.size() / n_head;
  const int nt = step_threads(uint64_t{n_head} * n_rows * dim, n_head, threads);
  if (nt == 1) {
    model::sink_attention(q, sinks, rows, out, {scratch.data(), n_rows});
    return;
  }
  // Validate once on the calling thread, so no per-head call can fail inside the region.
  if (out.size() != q.size())
    fail("attention_heads: q has {} values and out {} for {} heads", q.size(), out.size(), n_head);
  if (q.data() < out.data() + out.size() && out.data() < q.data() + q.size())
    fail("attention_heads: out overlaps q");
  for (const float* r : rows)
    if (r == nullptr) fail("attention_heads: null KV row pointer");
  scratch.resize(std::max(scratch.size(), static_cast<size_t>(nt) * n_rows));
  parallel::parallel_for(nt, static_cast<int64_t>(n_head), [&](int64_t hi, int slot) {
    const auto h = static_cast<size_t>(hi);
    float* sc = scratch.data() + static_cast<size_t>(slot) * n_rows;  // this thread's scratch
    model::sink_attention(q.subspan(h * dim, dim), sinks.subspan(h, 1), rows,
                          out.subspan(h * dim, dim), {sc, n_rows});
  });
}

void indexer_scores_rows(std::span<const float> q, std::span<const float> w,
                         std::span<const float> rows, std::span<float> scores, int threads) {
  const size_t n_rows = scores.size();
  const int nt = step_threads(uint64_t{n_rows} * q.size(), n_rows, threads);
  const size_t n_head = w.size();
  if (nt == 1 || n_head == 0 || q.empty() || q.size() % n_head != 0 ||
      rows.size() != n_rows * (q.size() / n_head)) {
    model::indexer_scores(q, w, rows, scores);  // also reports any size mismatch
    return;
  }
  const size_t dim = q.size() / n_head;
  parallel::parallel_ranges(nt, static_cast<int64_t>(n_rows), [&](int64_t lo, int64_t hi, int) {
    const auto l = static_cast<size_t>(lo), h = static_cast<size_t>(hi);
    model::indexer_scores(q, w, rows.subspan(l * dim, (h - l) * dim), scores.subspan(l, h - l));
  });
}

}  // namespace ds4::cpu
