// The per-token attention steps of the CPU forward pass, split across the thread pool's threads
// when the work is large enough to pay for a fork/join: sink attention by head (spec §3.4.8) and
// the indexer scores by compressed row (spec §3.4.7). Every head / row is computed by the same
// src/model function on the same inputs, so the results are bit-identical to the one-call
// versions whatever the thread count.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ds4::cpu {

/// Threads for `macs` multiply-adds split into `items` independent pieces: at most `threads`,
/// at most `items`, and at most one per 32 Ki multiply-adds (below that a fork/join costs more
/// than it saves). Always >= 1.
int step_threads(uint64_t macs, uint64_t items, int threads);

/// model::sink_attention of all heads (q, out: n_head x head_dim f32; sinks: n_head; rows:
/// pointers to head_dim-wide f32 KV rows), heads split across step_threads(n_head * rows *
/// head_dim, n_head, threads) threads. `scratch` grows to threads x rows floats. Throws
/// ds4::Error as sink_attention does (checked before any thread starts).
void attention_heads(std::span<const float> q, std::span<const float> sinks,
                     std::span<const float* const> rows, std::span<float> out,
                     std::vector<float>& scratch, int threads);

/// model::indexer_scores (q: n_head x head_dim prepared query, w: n_head weights, rows:
/// n_rows x head_dim f32 compressed indexer rows, scores: n_rows f32) with the rows split in
/// contiguous ranges across step_threads(n_rows * q.size(), n_rows, threads) threads. Throws
/// ds4::Error as indexer_scores does (checked before any thread starts).
void indexer_scores_rows(std::span<const float> q, std::span<const float> w,
                         std::span<const float> rows, std::span<float> scores, int threads);

}  // namespace ds4::cpu
