#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/error.h"

namespace ds4::model {
namespace {

void check_n_rot(uint32_t n_rot) {
  if (n_rot == 0 || n_rot % 2 != 0 || n_rot > kMaxRopeDims) {
    fail("RoPE: rotated dimension count {} must be even and in [2, {}]", n_rot, kMaxRopeDims);
  }
}

void check_base(float base) {
  if (!(base > 1.0f) || !std::isfinite(base)) {
    fail("RoPE: frequency base {} must be a finite value > 1", base);
  }
}

}  // namespace

float rope_yarn_corr_dim(uint32_t n_rot, uint64_t orig_ctx, float beta, float base) {
  const float two_pi_beta = beta * 2.0f * std::numbers::pi_v<float>;
  return static_cast<float>(n_rot) * std::log(static_cast<float>(orig_ctx) / two_pi_beta) /
         (2.0f * std::log(base));
}

RopeParams rope_params_plain(float base, uint32_t n_rot) {
  check_n_rot(n_rot);
  check_base(base);
  RopeParams p;
  p.n_rot = n_rot;
  p.freq_base = base;
  p.theta_scale = std::pow(base, -2.0f / static_cast<float>(n_rot));
  return p;
}

RopeParams rope_params_yarn(float base, float scale_factor, uint64_t orig_ctx, float beta_fast,
                            float beta_slow, uint32_t n_rot) {
  RopeParams p = rope_params_plain(base, n_rot);
  if (!(scale_factor > 1.0f) || !std::isfinite(scale_factor)) {
    fail("RoPE: YaRN scale factor {} must be a finite value > 1", scale_factor);
  }
  if (orig_ctx == 0) fail("RoPE: YaRN original context length must be > 0");
  if (!(beta_fast > 0.0f) || !(beta_slow > 0.0f)) {
    fail("RoPE: YaRN betas must be > 0 (beta_fast {}, beta_slow {})", beta_fast, beta_slow);
  }
  p.freq_scale = 1.0f / scale_factor;
  p.yarn = true;
  p.corr_low = std::max(0.0f, std::floor(rope_yarn_corr_dim(n_rot, orig_ctx, beta_fast, base)));
  p.corr_high = std::min(static_cast<float>(n_rot - 1),
                         std::ceil(rope_yarn_corr_dim(n_rot, orig_ctx, beta_slow, base)));
  return p;
}

RopeParams rope_params_for_layer(const RopeConfig& config, uint32_t compress_ratio) {
  if (compress_ratio == 0) return rope_params_plain(config.freq_base, config.n_rot);
  if (config.scale_factor == 1.0f) {
    return rope_params_plain(config.compress_freq_base, config.n_rot);
  }
  if (!(config.scale_factor > 1.0f)) {
    fail("RoPE: scale factor {} must be >= 1", config.scale_factor);
  }
  return rope_params_yarn(config.compress_freq_base, config.scale_factor, config.orig_ctx,
                          config.beta_fast, config.beta_slow, config.n_rot);
}

void rope_angles(const RopeParams& params, uint32_t pos, std::span<float> cos_out,
                 std::span<float> sin_out) {
  check_n_rot(params.n_rot);
  const size_t n_pair = params.n_rot / 2;
  if (cos_out.size() != n_pair || sin_out.size() != n_pair) {
    fail("rope_angles: expected {} cos/sin values, got {} and {}", n_pair, cos_out.size(),
         sin_out.size());
  }
  const float ramp_den = std::max(0.001f, params.corr_high - params.corr_low);
  float theta_ext = static_cast<float>(pos);
  for (size_t k = 0; k < n_pair; ++k) {
    const float theta_int = params.freq_scale * theta_ext;
    float theta = theta_int;
    if (params.yarn) {
      const float y = (static_cast<float>(k) - params.corr_low) / ramp_den;
      const float ramp = 1.0f - std::min(1.0f, std::max(0.0f, y));
      theta = theta_int * (1.0f - ramp) + theta_ext * ramp;
    }
    cos_out[k] = std::cos(theta);
    sin_out[k] = std::sin(theta);
    theta_ext *= params.theta_scale;
  }
}

void rope_tail_apply(std::span<float> x, size_t head_dim, std::span<const float> cos,
                     std::span<const float> sin, bool inverse) {
  const size_t n_rot = 2 * cos.size();
  if (sin.size() != cos.size() || cos.empty()) {
    fail("rope_tail_apply: cos/sin sizes {} and {} must be equal and non-zero", cos.size(),
         sin.size());
  }
  if (head_dim < n_rot || x.empty() || x.size() % head_dim != 0) {
    fail("rope_tail_apply: {} values are not whole heads of width {} with a {}-wide tail",
         x.size(), head_dim, n_rot);
  }
  const float sign = inverse ? -1.0f : 1.0f;
  for (size_t off = head_dim - n_rot; off < x.size(); off += head_dim) {
    float* t = x.data() + off;
    for (size_t k = 0; k < cos.size(); ++k) {
      const float c = cos[k];
      const float s = sign * sin[k];
      const float x0 = t[2 * k];
      const float x1 = t[2 * k + 1];
      t[2 * k] = x0 * c - x1 * s;
      t[2 * k + 1] = x0 * s + x1 * c;
    }
  }
}

void rope_tail(std::span<float> x, size_t head_dim, const RopeParams& params, uint32_t pos,
               bool inverse) {
  check_n_rot(params.n_rot);
  float c[kMaxRopeDims / 2];
  float s[kMaxRopeDims / 2];
  const size_t n_pair = params.n_rot / 2;
  rope_angles(params, pos, {c, n_pair}, {s, n_pair});
  rope_tail_apply(x, head_dim, {c, n_pair}, {s, n_pair}, inverse);
}

}  // namespace ds4::model
