// MoE router of DeepSeek V4 (model-spec §3.5, §7 item 5, failure-modes item 12).
//
//   logits = W_gate_inp * h                   (backend matvec, n_expert values)
//   p      = router_probs(logits)            p_e = sqrt(softplus(logit_e))
//   sel    = router_select_top_k(p, bias)    (layers >= 3) or router_select_hash(tid2eid row)
//   w      = router_weights(p, sel, 1.5)     w_i = p_sel_i / max(sum_j p_sel_j, 2^-14) * 1.5
//
// softplus(z) = z (z > 20), exp(z) (z < -20), log1p(exp(z)) otherwise, in f32. This never
// overflows for finite z (exp is only taken of z <= 20) and is accurate to f32 rounding over
// the whole range (the branches drop terms below 1e-8 relative). Very negative logits
// underflow gracefully: exp(z) is subnormal below z = -87.3 and exactly 0 below about -103.9,
// so p = 0; the 2^-14 floor on the sum then keeps the weights finite (all 0) instead of
// 0/0. z = -inf gives p = 0; z = +inf or NaN gives p = inf / NaN, which router_weights
// rejects with an error rather than propagating NaN weights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace ds4::model {

/// Floor of the selected-probability sum (2^-14) in the weight normalisation.
inline constexpr float kRouterMinWeightSum = 6.103515625e-5f;

/// softplus with the reference's piecewise definition (see file comment).
float router_softplus(float z);

/// p[e] = sqrt(softplus(logits[e])) for every expert. logits, p: n_expert values each (p may
/// alias logits). Throws ds4::Error on size mismatch.
void router_probs(std::span<const float> logits, std::span<float> p);

/// Top-k selection on p[e] + bias[e] (bias may be empty = no bias), selected.size() = k.
/// Writes expert ids in descending selection score, ties to the lower id (the reference
/// inserts with strict '>'); NaN scores rank below every number.
/// Throws ds4::Error when bias is neither empty nor p-sized, or k > p.size().
void router_select_top_k(std::span<const float> p, std::span<const float> bias,
                         std::span<int32_t> selected);

/// Hash routing (layers 0-2): selected = tid2eid[token][0..k), k = selected.size().
/// tid2eid: n_vocab rows of k int32 expert ids (GGUF I32 [k, n_vocab]).
/// Throws ds4::Error when the token is outside the table, the table is not whole rows of k,
/// or an expert id is outside [0, n_expert).
void router_select_hash(std::span<const int32_t> tid2eid, int64_t token, size_t n_expert,
                        std::span<int32_t> selected);

/// Expert weights w[i] = p[selected[i]] / max(sum, 2^-14) * scale, with sum the f32 sum of the
/// selected p in order (unbiased p; spec §3.5 "Weights"). weights.size() = selected.size().
/// Throws ds4::Error on size mismatch, an expert id outside p, or a non-finite selected p
/// (logit +inf or NaN).
void router_weights(std::span<const float> p, std::span<const int32_t> selected, float scale,
                    std::span<float> weights);

}  // namespace ds4::model
