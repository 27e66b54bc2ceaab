#include "model/router.h"

#include <cmath>

#include "common/error.h"
#include "model/vector_ops.h"

namespace ds4::model {

float router_softplus(float z) {
  if (z > 20.0f) return z;
  if (z < -20.0f) return detail::exp_f32(z);
  return detail::log1p_f32(detail::exp_f32(z));
}

void router_probs(std::span<const float> logits, std::span<float> p) {
  if (p.size() != logits.size()) {
    fail("router_probs: {} logits but {} outputs", logits.size(), p.size());
  }
  for (size_t e = 0; e < logits.size(); ++e) p[e] = std::sqrt(router_softplus(logits[e]));
}

void router_select_top_k(std::span<const float> p, std::span<const float> bias,
                         std::span<int32_t> selected) {
  const size_t n = p.size();
  const size_t k = selected.size();
  if (!bias.empty() && bias.size() != n) {
    fail("router_select_top_k: bias has {} values, expected {} (or none)", bias.size(), n);
  }
  if (k > n || n > INT32_MAX) fail("router_select_top_k: cannot select {} of {} experts", k, n);
  // Insertion into a descending list of k; a candidate enters before the first entry it
  // strictly beats, so equal scores keep the earlier (lower) id first. NaN never beats
  // anything and is beaten by everything.
  size_t filled = 0;
  auto beats = [](float a, float b) { return a > b || (std::isnan(b) && !std::isnan(a)); };
  for (size_t e = 0; e < n; ++e) {
    const float s = bias.empty() ? p[e] : p[e] + bias[e];
    size_t j = 0;
    while (j < filled) {
      const float sj = bias.empty() ? p[selected[j]] : p[selected[j]] + bias[selected[j]];
      if (beats(s, sj)) break;
      ++j;
    }
    if (j >= k) continue;
    for (size_t m = (filled < k ? filled : k - 1); m > j; --m) selected[m] = selected[m - 1];
    selected[j] = static_cast<int32_t>(e);
    if (filled < k) ++filled;
  }
}

void router_select_hash(std::span<const int32_t> tid2eid, int64_t token, size_t n_expert,
                        std::span<int32_t> selected) {
  const size_t k = selected.size();
  if (k == 0 || tid2eid.size() % k != 0) {
    fail("router_select_hash: table of {} ids is not whole rows of {}", tid2eid.size(), k);
  }
  const size_t n_rows = tid2eid.size() / k;
  if (token < 0 || static_cast<uint64_t>(token) >= n_rows) {
    fail("router_select_hash: token id {} outside the hash routing table ({} rows)", token,
         n_rows);
  }
  const int32_t* row = tid2eid.data() + static_cast<size_t>(token) * k;
  for (size_t i = 0; i < k; ++i) {
    if (row[i] < 0 || static_cast<size_t>(row[i]) >= n_expert) {
      fail("router_select_hash: token {} maps to expert {} outside [0, {})", token, row[i],
           n_expert);
    }
    selected[i] = row[i];
  }
}

void router_weights(std::span<const float> p, std::span<const int32_t> selected, float scale,
                    std::span<float> weights) {
  if (weights.size() != selected.size()) {
    fail("router_weights: {} selected experts but {} weights", selected.size(), weights.size());
  }
  float sum = 0.0f;
  for (size_t i = 0; i < selected.size(); ++i) {
    const int32_t e = selected[i];
    if (e < 0 || static_cast<size_t>(e) >= p.size()) {
      fail("router_weights: expert id {} outside [0, {})", e, p.size());
    }
    if (!std::isfinite(p[e])) {
      fail("router_weights: router score of expert {} is {} (logit overflow or NaN; the model file's weights "
           "may be corrupt)", e, p[e]);
    }
    weights[i] = p[e];
    sum += weights[i];
  }
  if (sum < kRouterMinWeightSum) sum = kRouterMinWeightSum;
  for (float& w : weights) w = w / sum * scale;
}

}  // namespace ds4::model
