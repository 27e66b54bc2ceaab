#include "model/attention.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "model/vector_ops.h"

namespace ds4::model {

void sink_attention(std::span<const float> q, std::span<const float> sinks,
                    std::span<const float* const> rows, std::span<float> out,
                    std::span<float> scratch) {
  const size_t n_head = sinks.size();
  if (n_head == 0 || q.empty() || q.size() % n_head != 0 || out.size() != q.size()) {
    fail("sink_attention: q has {} values and out {} for {} heads", q.size(), out.size(), n_head);
  }
  if (scratch.size() < rows.size()) {
    fail("sink_attention: score scratch has {} floats, need {}", scratch.size(), rows.size());
  }
  if (q.data() < out.data() + out.size() && out.data() < q.data() + q.size()) {
    fail("sink_attention: out overlaps q");
  }
  for (const float* r : rows) {
    if (r == nullptr) fail("sink_attention: null KV row pointer");
  }
  const size_t dim = q.size() / n_head;
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(dim));
  float* score = scratch.data();
  for (size_t h = 0; h < n_head; ++h) {
    const float* qh = q.data() + h * dim;
    float m = sinks[h];
    for (size_t j = 0; j < rows.size(); ++j) {
      score[j] = detail::dot_f32(qh, rows[j], dim) * kq_scale;
      m = std::max(m, score[j]);
    }
    float* oh = out.data() + h * dim;
    std::fill(oh, oh + dim, 0.0f);
    float denom = detail::exp_f32(sinks[h] - m);
    for (size_t j = 0; j < rows.size(); ++j) {
      const float w = detail::exp_f32(score[j] - m);
      denom += w;
      detail::axpy_f32(oh, rows[j], w, dim);
    }
    detail::scale_f32(oh, 1.0f / denom, dim);
  }
}

}  // namespace ds4::model
