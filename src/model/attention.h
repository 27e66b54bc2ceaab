// Attention with sinks over a single shared K = V stream (model-spec §3.4.8).
//
// For each of the n_head query heads h (q_h: D values, already RoPE'd):
//   s_j = dot(q_h, kv_j) * (1/sqrt(D))       for every given row j
//   m   = max(sink_h, max_j s_j)
//   o_h = sum_j exp(s_j - m) * kv_j / (exp(sink_h - m) + sum_j exp(s_j - m))
// The sink adds probability mass but no value. Rows are passed as pointers so the backend
// can hand over the raw sliding-window rows followed by the selected compressed rows
// (ascending ids) without copying; rows that are masked out are simply not passed. The
// result is in the order given (f32 sums in row order, like the reference).
#pragma once

#include <cstddef>
#include <span>

namespace ds4::model {

/// Sink attention for all heads. q: n_head x head_dim; sinks: n_head (`attn_sinks`, f32);
/// rows: pointers to head_dim-wide KV rows (may be empty: the output is then 0);
/// out: n_head x head_dim; scratch: >= rows.size() floats (per-row scores).
/// n_head = sinks.size(), head_dim = q.size() / n_head.
/// Throws ds4::Error on size mismatch, a null row pointer, or out overlapping q.
void sink_attention(std::span<const float> q, std::span<const float> sinks,
                    std::span<const float* const> rows, std::span<float> out,
                    std::span<float> scratch);

}  // namespace ds4::model
