// Manifold-constrained hyper-connections (mHC), model-spec §3.2, §3.3, §3.6.
//
// The residual state X holds n_hc streams of width D, stream-major: stream r occupies
// X[r*D, (r+1)*D). Around every sublayer the backend does
//   mix   = hc_norm_projection(W_fn, X)               (§3.3 steps 1-2: W_fn * RMSNorm(X), 2n + n^2 values)
//   split = hc_split_sinkhorn(mix, scale, base, ...)  (§3.3 steps 3-4)
//   x     = hc_weighted_sum(X, split.pre)             (§3.3 step 5)
//   y     = sublayer(RMSNorm(x; norm))
//   X'    = hc_post(y, X, split.post, split.comb)     (§3.3 HC post)
// and at the end of the model hc_output_weights() + hc_weighted_sum() (§3.6).
//
// Combine matrix convention: comb[c + n*r] = M[r][c] ("r" = input stream, "c" = output
// stream); Sinkhorn normalises rows over c and columns over r, and
// X'[c] = post[c] * y + sum_r M[r][c] * X[r].
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/ggml_type.h"
#include "model/norms.h"

namespace ds4::model {

/// eps of the hyper-connection Sinkhorn and pre weights (`deepseek4.hyper_connection.epsilon`).
inline constexpr float kHcEps = 1e-6f;

/// Largest hyper-connection count accepted (the model uses 4).
inline constexpr size_t kMaxHc = 16;

/// Number of control values one HC projection produces: n pre + n post + n*n combine (24 for n=4).
constexpr size_t hc_mix_count(size_t n_hc) { return 2 * n_hc + n_hc * n_hc; }

/// Replicates the token embedding e (D values) into all n_hc streams of X (n_hc*D values)
/// (spec §3.2). Throws ds4::Error on size mismatch or n_hc outside [1, kMaxHc].
void hc_from_embedding(std::span<const float> e, size_t n_hc, std::span<float> x_state);

/// Chains of the HC projection's sums (hc_projection): element i of a row goes to chain i mod 64.
inline constexpr size_t kHcProjChains = 64;

/// The HC control projection mix = W_fn * flat (spec §3.3 step 2, §3.6), `rows` rows of
/// flat.size() float weights of `type` (F32, F16 or BF16), row r at w + r * row_bytes, in this
/// summation order (shared with the CUDA kernels, bit for bit): each product w[i] * flat[i] is
/// rounded to f32 and added to chain i mod kHcProjChains in increasing i, then the chains are
/// added pairwise by halving (chain l += chain l + s for s = 32, 16, ..., 1); mix[r] is chain 0.
/// The order is ours (the reference's is its GEMM's): 64 short chains instead of a long one, so
/// the GPU's decode step is not bound by one sequential chain per row. mix: rows values.
/// Throws ds4::Error for another weight type, a row shorter than flat, or mix.size() != rows.
void hc_projection(GgmlType type, const uint8_t* w, size_t row_bytes, size_t rows, std::span<const float> flat,
                   std::span<float> mix);

/// The HC control mixes of a state (spec §3.3 steps 1-2, §3.6): mix[r] = hc_projection(W_fn,
/// x_state)[r] * s, with s = rms_scale(x_state, eps) the weightless RMSNorm's factor over all
/// n_hc*D values. The spec writes W_fn * RMSNorm(x); the scale is applied after the projection
/// instead of before, as in DeepSeek's reference (`F.linear(x, hc_fn) * rsqrt`): the same value
/// up to f32 rounding, and the GPU can then sum the squares beside the projection instead of
/// before it. w, row_bytes, rows: as hc_projection; mix: rows values.
/// Throws ds4::Error as hc_projection, or on an empty state.
void hc_norm_projection(GgmlType type, const uint8_t* w, size_t row_bytes, size_t rows,
                        std::span<const float> x_state, float eps, std::span<float> mix);

/// Splits the projected mixes into pre/post weights and the Sinkhorn-normalised combine
/// matrix (spec §3.3 steps 3-4), in f32 with the reference's operation order:
///   pre[i]  = 1/(1+exp(-(mix[i]*scale[0] + base[i]))) + eps
///   post[i] = 2/(1+exp(-(mix[n+i]*scale[1] + base[n+i])))
///   L[r][c] = mix[2n + n*r + c]*scale[2] + base[2n + n*r + c]
///   iteration 1: rows M[r][.] = softmax(L[r][.]) + eps, then columns M[.][c] /= (sum_r + eps);
///   iterations 2..iters: rows /= (sum_c + eps), then columns /= (sum_r + eps).
/// mix, base: hc_mix_count(n) values; scale: 3 values; pre, post: n; comb: n*n with
/// comb[c + n*r] = M[r][c]. n = pre.size().
/// Throws ds4::Error on size mismatch, n outside [1, kMaxHc] or iters < 1.
void hc_split_sinkhorn(std::span<const float> mix, std::span<const float> scale,
                       std::span<const float> base, int iters, float eps, std::span<float> pre,
                       std::span<float> post, std::span<float> comb);

/// Sublayer input x[d] = sum_r w[r] * X[r][d] (f32, streams added in order r = 0..n-1;
/// spec §3.3 step 5 and §3.6). x_state: n*D, w: n, out: D. n = w.size().
/// Throws ds4::Error on size mismatch or n outside [1, kMaxHc].
void hc_weighted_sum(std::span<const float> x_state, std::span<const float> w,
                     std::span<float> out);

/// HC post (spec §3.3): out[c] = post[c] * y + sum_r comb[c + n*r] * X[r] for every stream c,
/// terms added in order r = 0..n-1. y: D, x_state: n*D, post: n, comb: n*n, out: n*D.
/// out must not overlap x_state or y (every output stream reads all input streams).
/// Throws ds4::Error on size mismatch, overlap, or n outside [1, kMaxHc].
void hc_post(std::span<const float> y, std::span<const float> x_state,
             std::span<const float> post, std::span<const float> comb, std::span<float> out);

/// Output-head stream weights (spec §3.6): w[i] = sigmoid(logit[i]*scale[0] + base[i]) + eps
/// with the numerically stable sigmoid of the reference's head (exp of a non-positive
/// argument only). logits (= hc_norm_projection(W_out_hc_fn, X)), base, w: n values; scale: >= 1.
/// Throws ds4::Error on size mismatch or n outside [1, kMaxHc].
void hc_output_weights(std::span<const float> logits, std::span<const float> scale,
                       std::span<const float> base, std::span<float> w, float eps = kHcEps);

}  // namespace ds4::model
