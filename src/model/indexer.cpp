#include "model/indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"
#include "model/kv_quant.h"
#include "model/vector_ops.h"

namespace ds4::model {

void indexer_prepare_query(std::span<float> q, size_t head_dim, const RopeParams& rope,
                           uint32_t pos) {
  if (head_dim == 0 || q.empty() || q.size() % head_dim != 0) {
    fail("indexer_prepare_query: {} values are not whole {}-wide heads", q.size(), head_dim);
  }
  rope_tail(q, head_dim, rope, pos, /*inverse=*/false);
  for (size_t off = 0; off < q.size(); off += head_dim) {
    indexer_qat_row(q.subspan(off, head_dim));
  }
}

void indexer_scores(std::span<const float> q, std::span<const float> w,
                    std::span<const float> rows, std::span<float> scores) {
  const size_t n_head = w.size();
  if (n_head == 0 || q.empty() || q.size() % n_head != 0) {
    fail("indexer_scores: {} query values are not {} whole heads", q.size(), n_head);
  }
  const size_t dim = q.size() / n_head;
  if (rows.size() != scores.size() * dim) {
    fail("indexer_scores: {} row values are not {} rows of {}", rows.size(), scores.size(), dim);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim * n_head));
  for (size_t c = 0; c < scores.size(); ++c) {
    const float* row = rows.data() + c * dim;
    float s = 0.0f;
    for (size_t h = 0; h < n_head; ++h) {
      const float dot = detail::dot_f32(row, q.data() + h * dim, dim);
      s += std::max(dot, 0.0f) * (w[h] * scale);
    }
    scores[c] = s;
  }
}

size_t indexer_select_top_k(std::span<const float> scores, size_t top_k,
                            std::span<uint32_t> idx) {
  const size_t n = scores.size();
  if (n > UINT32_MAX) fail("indexer_select_top_k: {} rows exceed the 32-bit row id range", n);
  if (idx.size() < n) fail("indexer_select_top_k: index scratch has {} entries, need {}", idx.size(), n);
  std::iota(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(n), 0u);
  if (n <= top_k) return n;
  // Strict weak order "ranks higher": larger score first, NaN last, lower id on ties.
  const float* s = scores.data();
  auto higher = [s](uint32_t a, uint32_t b) {
    const float sa = s[a], sb = s[b];
    const bool na = std::isnan(sa), nb = std::isnan(sb);
    if (na != nb) return nb;
    if (!na && sa != sb) return sa > sb;
    return a < b;
  };
  const auto first = idx.begin();
  const auto kth = first + static_cast<std::ptrdiff_t>(top_k);
  std::nth_element(first, kth, first + static_cast<std::ptrdiff_t>(n), higher);
  std::sort(first, kth);
  return top_k;
}

}  // namespace ds4::model
