// Tail RoPE with interleaved pairs, plain or YaRN-blended (model-spec §1.4, §3.4.3).
//
// Only the last n_rot values of each head are rotated; pair k = (t[2k], t[2k+1]) of the tail
// t turns by theta_k(p):
//   theta_ext(k) = p * base^(-2k/n_rot)
//   plain layers:      theta = theta_ext
//   YaRN layers:       theta = theta_int*(1 - ramp(k)) + theta_ext*ramp(k), theta_int = theta_ext*freq_scale,
//                      ramp(k) = 1 - clamp((k - low) / max(0.001, high - low), 0, 1)
// Forward: (t0, t1) -> (t0 c - t1 s, t0 s + t1 c); inverse uses -s.
//
// Angles follow the CPU reference exactly: theta_ext is computed iteratively in f32,
// theta_ext(0) = f32(p), theta_ext(k+1) = theta_ext(k) * powf(base, -2/n_rot), and cos/sin
// are f32 cosf/sinf of the f32 angle (CUDA uses powf per pair: a tiny difference). The
// generic YaRN magnitude factor (1 + 0.1 ln(1/freq_scale)) is NOT applied: the reference
// multiplies it by its own reciprocal, which is exactly 1.0f in f32 (spec §3.4.3, §9 item 10).
//
// Hot-loop use: compute the angles once per (layer kind, position) with rope_angles() and
// apply them to every head with rope_tail_apply(); rope_tail() does both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace ds4::model {

/// Largest n_rot accepted (the model uses 64).
inline constexpr uint32_t kMaxRopeDims = 256;

/// Model-level RoPE hyperparameters (spec §1.1 and §1.3 metadata keys). Defaults are DeepSeek V4
/// Flash's values.
struct RopeConfig {
  uint32_t n_rot = 64;                 ///< `deepseek4.rope.dimension_count`
  float freq_base = 10000.0f;          ///< `deepseek4.rope.freq_base` (dense layers)
  float compress_freq_base = 160000.0f;  ///< `deepseek4.attention.compress_rope_freq_base`
  float scale_factor = 16.0f;          ///< `deepseek4.rope.scaling.factor`
  uint64_t orig_ctx = 65536;           ///< `deepseek4.rope.scaling.original_context_length`
  float beta_fast = 32.0f;             ///< `deepseek4.rope.scaling.yarn_beta_fast`
  float beta_slow = 1.0f;              ///< `deepseek4.rope.scaling.yarn_beta_slow`
};

/// The rotation applied by one layer kind. Build with rope_params_plain / rope_params_yarn /
/// rope_params_for_layer, which validate the inputs.
struct RopeParams {
  uint32_t n_rot = 0;         ///< rotated tail width (even)
  float freq_base = 0.0f;     ///< base of theta_ext
  float theta_scale = 0.0f;   ///< powf(freq_base, -2/n_rot), the per-pair angle ratio
  float freq_scale = 1.0f;    ///< theta_int = theta_ext * freq_scale (1/scale factor for YaRN)
  bool yarn = false;          ///< blend theta_int/theta_ext with the ramp
  float corr_low = 0.0f;      ///< ramp start (pairs k <= low keep theta_ext)
  float corr_high = 0.0f;     ///< ramp end (pairs k >= high use theta_int)
};

/// YaRN correction dimension (spec §1.4), f32 as in the reference:
/// cd = n_rot * ln(orig_ctx / (beta * 2 pi)) / (2 ln(base)).
float rope_yarn_corr_dim(uint32_t n_rot, uint64_t orig_ctx, float beta, float base);

/// Plain rotation with theta = p * base^(-2k/n_rot) (dense layers 0-1 and MTP: base 10000).
/// Throws ds4::Error when n_rot is odd, 0 or > kMaxRopeDims, or base is not a finite value > 1.
RopeParams rope_params_plain(float base, uint32_t n_rot);

/// YaRN-blended rotation (compressed layers: base 160000, factor 16, orig ctx 65536, betas
/// 32/1 give freq_scale 1/16, low 15, high 25): low = max(0, floor(cd(beta_fast))),
/// high = min(n_rot-1, ceil(cd(beta_slow))). Throws ds4::Error on an invalid n_rot or base,
/// scale_factor <= 1, orig_ctx == 0, or non-positive betas.
RopeParams rope_params_yarn(float base, float scale_factor, uint64_t orig_ctx, float beta_fast,
                            float beta_slow, uint32_t n_rot);

/// The parameters of a layer with compression ratio `compress_ratio` (spec §3.4.3
/// `rope_tail_layer_inplace`): ratio 0 -> plain(freq_base); otherwise YaRN at
/// compress_freq_base (or plain at compress_freq_base when scale_factor == 1).
/// Throws ds4::Error on invalid config values (see above) or scale_factor < 1.
RopeParams rope_params_for_layer(const RopeConfig& config, uint32_t compress_ratio);

/// Writes cos/sin of theta_k(pos) for the n_rot/2 pairs (k = 0..n_rot/2-1).
/// cos_out, sin_out: n_rot/2 floats. Throws ds4::Error on size mismatch.
void rope_angles(const RopeParams& params, uint32_t pos, std::span<float> cos_out,
                 std::span<float> sin_out);

/// Rotates the tail (last 2*cos.size() values) of every head of x in place; x holds
/// x.size()/head_dim heads of head_dim values. inverse = true rotates by -theta.
/// Throws ds4::Error when x is not whole heads, the tail is wider than a head, or cos/sin
/// sizes differ.
void rope_tail_apply(std::span<float> x, size_t head_dim, std::span<const float> cos,
                     std::span<const float> sin, bool inverse);

/// rope_angles + rope_tail_apply (angles on the stack; no allocation).
void rope_tail(std::span<float> x, size_t head_dim, const RopeParams& params, uint32_t pos,
               bool inverse);

}  // namespace ds4::model
