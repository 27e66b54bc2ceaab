// SwiGLU of the routed and shared experts (model-spec §3.5, §9 item 4).
//
//   g = W_gate * h, u = W_up * h            (backend matvecs, n_ff values each)
//   mid = expert_swiglu(g, u, clamp, w)     mid_i = silu(min(g_i, c)) * clamp(u_i, -c, c) * w
//   d = W_down * mid                         (backend matvec)
// The clamp is asymmetric: the gate only from above. Routed experts pass their router weight
// w (it is applied before the down projection); the shared expert passes w = 1.
// Finite inputs always give finite outputs (silu(-1e4) = -0); inf/NaN inputs propagate.
#pragma once

#include <span>

namespace ds4::model {

/// SwiGLU clamp of every layer (`deepseek4.swiglu_clamp_exp`).
inline constexpr float kSwigluClamp = 10.0f;

/// silu(z) = z * sigmoid(z), with the stable sigmoid (exp of a non-positive argument only).
float silu(float z);

/// out[i] = silu(g) * u * weight with g = min(gate[i], clamp), u = clamp(up[i], -clamp, clamp),
/// f32, multiplied left to right. The clamp is skipped when clamp <= 1e-6 (as the reference).
/// gate, up, out: n values each; out may alias gate or up.
/// Throws ds4::Error on size mismatch.
void expert_swiglu(std::span<const float> gate, std::span<const float> up, float clamp,
                   float weight, std::span<float> out);

}  // namespace ds4::model
