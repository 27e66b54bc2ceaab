// Lightning indexer of the ratio-4 layers (model-spec §3.4.7): picks which compressed
// attention rows a token attends to once more than top_k (512) rows are visible.
//
// Backend sequence for token p:
//   qI = W_iq_b * qr_n                          (n_head x head_dim, 64 x 128)
//   indexer_prepare_query(qI, rope, p)          (tail RoPE + Hadamard + FP4 per head)
//   w  = W_iproj * h                            (n_head raw weights)
//   indexer_scores(qI, w, rows, scores)         (rows = indexer compressed cache)
//   indexer_select_top_k(scores, top_k, idx)    (ascending row ids of the kept rows)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "model/rope.h"

namespace ds4::model {

/// Prepares indexer query heads in place: tail RoPE at position pos with the layer's params
/// (rotating the last rope.n_rot dims of each head), then indexer_qat_row on every head.
/// q: n_head x head_dim values (128 in the real model). Throws ds4::Error when q is not whole
/// heads or a head is not a power-of-two multiple of 32 wide.
void indexer_prepare_query(std::span<float> q, size_t head_dim, const RopeParams& rope,
                           uint32_t pos);

/// score[c] = sum_h (w[h] * s) * max(0, dot(q_h, row_c)), s = 1/sqrt(n_head * head_dim)
/// (spec §3.4.7 steps 4-5), f32, heads added in order h = 0..n_head-1.
/// q: n_head x head_dim (prepared), w: n_head raw `indexer_proj` outputs, rows: n_rows x
/// head_dim (indexer compressed cache, row-major), scores: n_rows. n_head = w.size(),
/// head_dim = q.size() / n_head. Throws ds4::Error on size mismatch.
void indexer_scores(std::span<const float> q, std::span<const float> w,
                    std::span<const float> rows, std::span<float> scores);

/// Selects the top_k highest scores, ties to the lower row id, NaN ranked below every number
/// (spec §3.4.7 step 6). Writes the selected row ids in ascending order to idx[0, count) and
/// returns count = min(top_k, n). When n <= top_k every row is selected (0..n-1), as the
/// model only filters when more than top_k rows are visible. idx: scratch of >= n entries
/// (entries past count are clobbered). Throws ds4::Error when idx is too small or
/// n >= 2^32.
size_t indexer_select_top_k(std::span<const float> scores, size_t top_k,
                            std::span<uint32_t> idx);

}  // namespace ds4::model
