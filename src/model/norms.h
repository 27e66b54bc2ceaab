// RMSNorm variants of DeepSeek V4 (model-spec §3.1, §3.3 step 1, §3.4.1, §3.4.2, §3.6).
// All take f32 vectors and accumulate the sum of squares in double, as the CPU reference
// does; the scale is then formed in f32: s = 1 / sqrt(f32(ss / n) + eps). As in the
// reference, a mean square above FLT_MAX (rms above ~1.8e19) makes s = 0.
#pragma once

#include <cstddef>
#include <span>

namespace ds4::model {

/// eps of every RMSNorm in the model (`deepseek4.attention.layer_norm_rms_epsilon`).
inline constexpr float kRmsEps = 1e-6f;

/// The f32 factor 1/sqrt(mean(x^2) + eps) that RMSNorm multiplies by (sum in double).
/// x: n >= 1 values. Throws ds4::Error when x is empty.
float rms_scale(std::span<const float> x, float eps = kRmsEps);

/// out[i] = (x[i] * s) * weight[i], s = rms_scale(x, eps) (spec §3.1 `RMSNorm(x; w)`).
/// x, weight, out: n values each (n >= 1); out may be the same array as x (in place).
/// Throws ds4::Error on size mismatch or n == 0.
void rms_norm(std::span<const float> x, std::span<const float> weight, std::span<float> out,
              float eps = kRmsEps);

/// out[i] = x[i] * s without weight (spec §3.1 `RMSNorm(x)`; used on the flattened
/// hyper-connection state, §3.3 step 1). out may be the same array as x.
/// Throws ds4::Error on size mismatch or n == 0.
void rms_norm_unweighted(std::span<const float> x, std::span<float> out, float eps = kRmsEps);

/// Per-head weightless RMSNorm in place (spec §3.4.1 `q_h = RMSNorm(q_h)`): x holds
/// n_head = x.size() / head_dim heads of head_dim values each, head h at [h*head_dim, ...).
/// Throws ds4::Error when head_dim == 0, x is empty or x.size() is not a multiple of head_dim.
void rms_norm_heads(std::span<float> x, size_t head_dim, float eps = kRmsEps);

}  // namespace ds4::model
