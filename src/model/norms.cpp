#include "model/norms.h"

#include <cmath>

#include "common/error.h"
#include "model/vector_ops.h"

namespace ds4::model {
namespace {

float scale_of(const float* x, size_t n, float eps) {
  const double ss = detail::sum_squares_f64(x, n);
  return 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
}

}  // namespace

float rms_scale(std::span<const float> x, float eps) {
  if (x.empty()) fail("rms_scale: empty input vector");
  return scale_of(x.data(), x.size(), eps);
}

void rms_norm(std::span<const float> x, std::span<const float> weight, std::span<float> out,
              float eps) {
  if (x.empty()) fail("rms_norm: empty input vector");
  if (weight.size() != x.size() || out.size() != x.size()) {
    fail("rms_norm: size mismatch: x has {} values, weight {}, out {}", x.size(), weight.size(),
         out.size());
  }
  const float s = scale_of(x.data(), x.size(), eps);
  const float* xp = x.data();
  const float* wp = weight.data();
  float* op = out.data();
  for (size_t i = 0; i < x.size(); ++i) op[i] = xp[i] * s * wp[i];
}

void rms_norm_unweighted(std::span<const float> x, std::span<float> out, float eps) {
  if (x.empty()) fail("rms_norm_unweighted: empty input vector");
  if (out.size() != x.size()) {
    fail("rms_norm_unweighted: size mismatch: x has {} values, out {}", x.size(), out.size());
  }
  const float s = scale_of(x.data(), x.size(), eps);
  const float* xp = x.data();
  float* op = out.data();
  for (size_t i = 0; i < x.size(); ++i) op[i] = xp[i] * s;
}

void rms_norm_heads(std::span<float> x, size_t head_dim, float eps) {
  if (head_dim == 0 || x.empty() || x.size() % head_dim != 0) {
    fail("rms_norm_heads: {} values are not a whole number of heads of width {}", x.size(),
         head_dim);
  }
  for (size_t off = 0; off < x.size(); off += head_dim) {
    float* h = x.data() + off;
    detail::scale_f32(h, scale_of(h, head_dim, eps), head_dim);
  }
}

}  // namespace ds4::model
