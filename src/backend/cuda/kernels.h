// Launchers of the CUDA backend's kernels (kernels_*.cu), callable from plain C++. Every pointer
// is device memory unless noted; every launch goes to the default stream and returns at once
// (errors surface at the next synchronising call, which the caller checks). Shapes follow the
// CPU units in src/model and src/quant, whose results the kernels reproduce operation for
// operation (same summation orders, round-half-even quantizers, no fused multiply-adds).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ds4::cuda {

/// Largest RoPE pair count passed by value (model::kMaxRopeDims / 2).
inline constexpr int kMaxRopePairs = 128;

/// cos/sin of one position's RoPE angles, computed on the host by model::rope_angles.
struct RopeCs {
  int n_pair = 0;
  float cos[kMaxRopePairs];
  float sin[kMaxRopePairs];
};

/// A weight matrix in device memory: `rows` rows of `cols` elements of ggml type `type`.
struct DevMatrix {
  uint32_t type = 0;
  const uint8_t* data = nullptr;
  int64_t cols = 0;
  int64_t rows = 0;
  size_t row_bytes = 0;
  explicit operator bool() const { return data != nullptr; }
};

/// Copies the IQ2_XXS grid/sign tables and the MXFP4 tables (host arrays) to constant memory.
/// Returns false when the copy failed.
bool upload_quant_tables(const uint64_t* iq2_grid, const uint8_t* iq2_signs,
                         const int8_t* mxfp4_doubled, const float* mxfp4_half_scale);

/// Bytes of one quantized activation row of `cols` values for weights of `type`
/// (quant::act_row_bytes(quant::activation_type(type), cols)).
size_t act_row_bytes(uint32_t type, int64_t cols);

/// Grouped matrix-vector product (spec §3.1): for g in [0, groups), r in [0, n_rows):
///   y[g*y_stride + r] = vec_dot(W row base_g + r, x_g)
/// with base_g = row0 + (ids ? ids[g] : g) * group_rows and x_g = x + g*x_stride (f32,
/// W.cols values; x_stride 0 shares one input). x_g is first quantized into `act_scratch`
/// (>= groups * act_row_bytes bytes) in the weight's activation format. Results equal
/// quant::vec_dot bit for bit.
void matvec(const DevMatrix& w, int64_t row0, int64_t n_rows, int64_t group_rows,
            const int32_t* ids, int groups, const float* x, int64_t x_stride, float* y,
            int64_t y_stride, uint8_t* act_scratch);

/// RMSNorm of `n_rows` rows of `dim` (model::rms_norm / rms_norm_unweighted / rms_norm_heads):
/// out = x * (1/sqrt(mean(x^2) + eps)) [* weight]; weight may be null; out may equal x.
void rms_norm(const float* x, const float* weight, float* out, int64_t dim, int n_rows, float eps);

/// HC pre tail (model::hc_split_sinkhorn + hc_weighted_sum): from mix [hc_mix] computes
/// pre/post [n_hc] and comb [n_hc^2], then sub_in [d] = sum_r pre[r] * x[r*d ..].
void hc_sinkhorn_pre(const float* mix, const float* scale, const float* base, int n_hc,
                     int iters, float eps, const float* x, int64_t d, float* pre, float* post,
                     float* comb, float* sub_in);

/// HC post (model::hc_post): out [n_hc*d] from y [d], x [n_hc*d], post, comb.
void hc_post(const float* y, const float* x, const float* post, const float* comb, int n_hc,
             int64_t d, float* out);

/// Output-head HC collapse (model::hc_output_weights + hc_weighted_sum): z [d].
void hc_output(const float* logits, const float* scale, const float* base, int n_hc, float eps,
               const float* x, int64_t d, float* z);

/// Tail RoPE (model::rope_tail_apply) on `n_heads` heads of `head_dim` values.
void rope_tail(float* x, int n_heads, int64_t head_dim, const RopeCs& cs, bool inverse);

/// KV row store (spec §3.4.2): FP8 round trip on row[0, n_fp8), f16 rounding of all `dim`
/// values, written to dst (row may be modified in place).
void kv_store(float* row, int64_t dim, int64_t n_fp8, float* dst);

/// Compressor push, first half (model::Compressor::push): APE row (pos % ratio) added to the
/// score, kv/score written to frontier row `state_row` of `width`.
void compressor_store(const float* kv, const float* score, const float* ape, int64_t width,
                      uint32_t ratio, uint32_t pos, int64_t state_row, float* state_kv,
                      float* state_score);

/// Softmax pooling of a full frontier (model::compressor_pool) into out [d].
void compressor_pool(const float* state_kv, const float* state_score, uint32_t ratio, int64_t d,
                     float* out);

/// Shifts a ratio-4 frontier's current lane (rows 4..7) into the previous lane (rows 0..3).
void compressor_shift(float* state_kv, float* state_score, int64_t width);

/// FP8 (E4M3FN, 64-value blocks) round trip of x[0, n) (model::fp8_kv_round_trip).
void fp8_round_trip(float* x, int64_t n);

/// Indexer QAT (model::indexer_qat_row) on n_rows rows of dim: Hadamard then FP4 round trip.
void indexer_qat(float* x, int n_rows, int64_t dim);

/// Rounds x[0, n) to f16 and copies it to dst.
void round_f16_copy(const float* x, int64_t n, float* dst);

/// Indexer scores (model::indexer_scores) of q [n_head*dim] with head weights w [n_head]
/// against rows [n_rows*dim] into scores [n_rows].
void indexer_scores(const float* q, const float* w, int n_head, int64_t dim, const float* rows,
                    int64_t n_rows, float* scores);

/// Top-k rows (model::indexer_select_top_k), ascending row ids into sel [k]; n > k.
void indexer_top_k(const float* scores, int64_t n, int64_t k, uint32_t* sel);

/// Sink attention (model::sink_attention) of q [n_head*dim] over the raw window positions
/// [lo, p] (ring `raw` of raw_cap rows) then compressed rows (`comp`, all n_comp of them, or
/// the n_sel rows listed in `sel`). scratch holds n_head * (window + compressed) floats.
void sink_attention(const float* q, const float* sinks, int n_head, int64_t dim,
                    const float* raw, int64_t raw_cap, int64_t lo, int64_t p, const float* comp,
                    int64_t n_comp, const uint32_t* sel, int64_t n_sel, float* scratch,
                    float* out);

/// Router (spec §3.5): probs from logits [n_expert], selection (hash row tid2eid[token] when
/// tid2eid is non-null, else biased top-k), weights, and `order` = the slots sorted by expert
/// id (stable). sel/weights/order hold n_used values.
void router(const float* logits, int n_expert, const float* bias, const int32_t* tid2eid,
            int32_t token, int n_used, float scale, float* probs, int32_t* sel, float* weights,
            int32_t* order);

/// SwiGLU (model::expert_swiglu) of `groups` rows of n: out = silu(g) * u * w[g] (w null: 1).
void swiglu(const float* gate, const float* up, int groups, int64_t n, float clamp,
            const float* w, float* out);

/// y[j] = (sum over slots in `order` of down[slot*d + j], from 0) + shared[j].
void moe_combine(const float* down, const int32_t* order, int n_used, int64_t d,
                 const float* shared, float* y);

}  // namespace ds4::cuda
