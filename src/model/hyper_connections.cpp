#include "model/hyper_connections.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/f16.h"
#include "model/vector_ops.h"

namespace ds4::model {
namespace {

void check_hc_count(const char* what, size_t n) {
  if (n < 1 || n > kMaxHc) fail("{}: hyper-connection count {} outside [1, {}]", what, n, kMaxHc);
}

bool overlaps(std::span<const float> a, std::span<const float> b) {
  return a.data() < b.data() + b.size() && b.data() < a.data() + a.size();
}

}  // namespace

void hc_from_embedding(std::span<const float> e, size_t n_hc, std::span<float> x_state) {
  check_hc_count("hc_from_embedding", n_hc);
  if (e.empty() || x_state.size() != n_hc * e.size()) {
    fail("hc_from_embedding: state has {} values, expected {} streams x {}", x_state.size(), n_hc,
         e.size());
  }
  for (size_t r = 0; r < n_hc; ++r) std::copy(e.begin(), e.end(), x_state.begin() + r * e.size());
}

void hc_projection(GgmlType type, const uint8_t* w, size_t row_bytes, size_t rows, std::span<const float> flat,
                   std::span<float> mix) {
  const size_t cols = flat.size();
  const size_t wb = type == GgmlType::F32 ? 4 : (type == GgmlType::F16 || type == GgmlType::BF16) ? 2 : 0;
  if (wb == 0) fail("hc_projection: weight type {} is not F32, F16 or BF16", static_cast<uint32_t>(type));
  if (row_bytes < cols * wb) fail("hc_projection: rows of {} bytes hold fewer than {} values", row_bytes, cols);
  if (mix.size() != rows) fail("hc_projection: {} outputs for {} rows", mix.size(), rows);
  std::vector<float> wv(cols);
  for (size_t r = 0; r < rows; ++r) {
    const uint8_t* row = w + r * row_bytes;
    for (size_t i = 0; i < cols; ++i) {  // the row's values as f32 (exact for every type)
      if (type == GgmlType::F32) {
        std::memcpy(&wv[i], row + 4 * i, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        wv[i] = type == GgmlType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
    }
    float acc[kHcProjChains] = {};
    for (size_t i0 = 0; i0 < cols; i0 += kHcProjChains) {
      const size_t n = std::min(kHcProjChains, cols - i0);
      for (size_t l = 0; l < n; ++l) {
        const float p = wv[i0 + l] * flat[i0 + l];
        acc[l] = acc[l] + p;
      }
    }
    for (size_t s = kHcProjChains / 2; s >= 1; s /= 2)
      for (size_t l = 0; l < s; ++l) acc[l] = acc[l] + acc[l + s];
    mix[r] = acc[0];
  }
}

void hc_norm_projection(GgmlType type, const uint8_t* w, size_t row_bytes, size_t rows,
                        std::span<const float> x_state, float eps, std::span<float> mix) {
  const float s = rms_scale(x_state, eps);
  hc_projection(type, w, row_bytes, rows, x_state, mix);
  for (float& m : mix) m = m * s;
}

void hc_split_sinkhorn(std::span<const float> mix, std::span<const float> scale,
                       std::span<const float> base, int iters, float eps, std::span<float> pre,
                       std::span<float> post, std::span<float> comb) {
  const size_t n = pre.size();
  check_hc_count("hc_split_sinkhorn", n);
  if (mix.size() != hc_mix_count(n) || base.size() != hc_mix_count(n) || scale.size() < 3 ||
      post.size() != n || comb.size() != n * n) {
    fail("hc_split_sinkhorn: for {} streams expected mix/base of {}, scale >= 3, post {}, comb {}; "
         "got mix {}, base {}, scale {}, post {}, comb {}",
         n, hc_mix_count(n), n, n * n, mix.size(), base.size(), scale.size(), post.size(),
         comb.size());
  }
  if (iters < 1) fail("hc_split_sinkhorn: Sinkhorn iteration count {} must be >= 1", iters);

  for (size_t i = 0; i < n; ++i) {
    const float z = mix[i] * scale[0] + base[i];
    pre[i] = 1.0f / (1.0f + detail::exp_f32(-z)) + eps;
  }
  for (size_t i = 0; i < n; ++i) {
    const float z = mix[n + i] * scale[1] + base[n + i];
    post[i] = 2.0f / (1.0f + detail::exp_f32(-z));
  }

  // comb[c + n*r] = M[r][c]: row r is contiguous.
  float* m = comb.data();
  const float* lm = mix.data() + 2 * n;
  const float* lb = base.data() + 2 * n;
  for (size_t r = 0; r < n; ++r) {  // iteration 1, rows: softmax + eps
    float* row = m + n * r;
    float row_max = -1.0e30f;
    for (size_t c = 0; c < n; ++c) {
      row[c] = lm[n * r + c] * scale[2] + lb[n * r + c];
      if (row[c] > row_max) row_max = row[c];
    }
    float sum = 0.0f;
    for (size_t c = 0; c < n; ++c) {
      row[c] = detail::exp_f32(row[c] - row_max);
      sum += row[c];
    }
    const float inv = 1.0f / sum;
    for (size_t c = 0; c < n; ++c) row[c] = row[c] * inv + eps;
  }
  auto normalise_columns = [&] {
    for (size_t c = 0; c < n; ++c) {
      float sum = 0.0f;
      for (size_t r = 0; r < n; ++r) sum += m[c + n * r];
      const float inv = 1.0f / (sum + eps);
      for (size_t r = 0; r < n; ++r) m[c + n * r] *= inv;
    }
  };
  normalise_columns();
  for (int it = 1; it < iters; ++it) {
    for (size_t r = 0; r < n; ++r) {
      float* row = m + n * r;
      float sum = 0.0f;
      for (size_t c = 0; c < n; ++c) sum += row[c];
      const float inv = 1.0f / (sum + eps);
      for (size_t c = 0; c < n; ++c) row[c] *= inv;
    }
    normalise_columns();
  }
}

void hc_weighted_sum(std::span<const float> x_state, std::span<const float> w,
                     std::span<float> out) {
  const size_t n = w.size();
  check_hc_count("hc_weighted_sum", n);
  const size_t d = out.size();
  if (d == 0 || x_state.size() != n * d) {
    fail("hc_weighted_sum: state has {} values, expected {} streams x {}", x_state.size(), n, d);
  }
  float* o = out.data();
  std::fill(out.begin(), out.end(), 0.0f);
  for (size_t r = 0; r < n; ++r) {
    const float* xr = x_state.data() + r * d;
    const float wr = w[r];
    for (size_t i = 0; i < d; ++i) o[i] += xr[i] * wr;
  }
}

void hc_post(std::span<const float> y, std::span<const float> x_state,
             std::span<const float> post, std::span<const float> comb, std::span<float> out) {
  const size_t n = post.size();
  check_hc_count("hc_post", n);
  const size_t d = y.size();
  if (d == 0 || x_state.size() != n * d || out.size() != n * d || comb.size() != n * n) {
    fail("hc_post: for {} streams of {} expected state/out {} and comb {}; got state {}, out {}, "
         "comb {}",
         n, d, n * d, n * n, x_state.size(), out.size(), comb.size());
  }
  if (overlaps(x_state, out) || overlaps(y, out)) {
    fail("hc_post: output state overlaps the input state or the sublayer output");
  }
  for (size_t c = 0; c < n; ++c) {
    float* oc = out.data() + c * d;
    const float pc = post[c];
    for (size_t i = 0; i < d; ++i) oc[i] = y[i] * pc;
    for (size_t r = 0; r < n; ++r) {
      const float* xr = x_state.data() + r * d;
      const float mrc = comb[c + n * r];
      for (size_t i = 0; i < d; ++i) oc[i] += mrc * xr[i];
    }
  }
}

void hc_output_weights(std::span<const float> logits, std::span<const float> scale,
                       std::span<const float> base, std::span<float> w, float eps) {
  const size_t n = w.size();
  check_hc_count("hc_output_weights", n);
  if (logits.size() != n || base.size() != n || scale.empty()) {
    fail("hc_output_weights: expected {} logits and base values and a scale; got {}, {}, {}", n,
         logits.size(), base.size(), scale.size());
  }
  for (size_t i = 0; i < n; ++i) {
    w[i] = detail::sigmoid_f32(logits[i] * scale[0] + base[i]) + eps;
  }
}

}  // namespace ds4::model
