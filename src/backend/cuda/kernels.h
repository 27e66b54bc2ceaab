// Launchers of the CUDA backend's kernels (kernels_*.cu), callable from plain C++. Every pointer
// is device memory unless noted; every launch goes to launch_stream() (launch_stream.h) and
// returns at once (errors surface at the next synchronising call, which the caller checks).
// Values that change from token to token (the position, the token id) are read from device
// memory (`pos`, `tokens`), so one captured CUDA graph replays every decode step. Shapes follow the
// CPU units in src/model and src/quant, whose results the kernels reproduce operation for
// operation (same summation orders, round-half-even quantizers, no fused multiply-adds).
// Launchers with an `n_tok` argument (default 1) also run a batch of tokens in one launch
// (layer-major prefill): token t reads and writes every per-token array at t times its size
// given above (x [n_hc*d] at t*n_hc*d, ...) and the position pos[t]; each token's values are
// exactly those of a launch for that token alone.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/synthetic/synthetic_blocks.h"

namespace ds4::cuda {

/// A weight matrix in device memory: `rows` rows of `cols` elements of ggml type `type`.
struct DevMatrix {
  uint32_t type = 0;
  const uint8_t* data = nullptr;
  int64_t cols = 0;
  int64_t rows = 0;
  size_t row_bytes = 0;
  explicit operator bool() const { return data != nullptr; }
};

/// Copies the IQ2_XXS grid and the MXFP4 tables (host arrays) to device memory. The IQ2_XXS
/// sign masks are computed in the kernels from their parity rule (quant::kIq2xxs.signs, checked
/// by tests/quant/tables_test.cpp). Returns false when the copy failed.
bool upload_quant_tables(const uint64_t* iq2_grid, const int8_t* mxfp4_doubled,
                         const float* mxfp4_half_scale);

/// Rewrites the rows of matvec weight `m` (already in device memory in GGUF layout) in place into
/// the layout the matvec/matmat kernels read: for Q8_0 and IQ2_XXS each row becomes its blocks'
/// payloads (32 / 64 bytes each) followed by their f16 scales (weight_layout.cuh); every other
/// type is left as is. Row sizes and offsets do not change. Call it once per matrix, after the
/// upload and before the first product; the token embedding (read by embed()) stays GGUF.
/// Synchronises the device. Fails (ds4::Error) on rows that are not whole blocks or over 200 KiB.
void to_device_layout(const DevMatrix& m);

/// Bytes of one quantized activation row of `cols` values for weights of `type`
/// (quant::act_row_bytes(quant::activation_type(type), cols)).
size_t act_row_bytes(uint32_t type, int64_t cols);

/// Grouped matrix-vector product (spec §3.1): for g in [0, groups), r in [0, n_rows):
///   y[g*y_stride + r] = vec_dot(W row base_g + r, x_g)
/// with base_g = row0 + (ids ? ids[g] : g) * group_rows and x_g = x + g*x_stride (f32,
/// W.cols values; x_stride 0 shares one input). x_g is first quantized into `act_scratch`
/// (>= groups * act_row_bytes bytes) in the weight's activation format. Results equal
/// quant::vec_dot bit for bit. A negative ids[g] (an expert another device holds) gives zeros.
void matvec(const DevMatrix& w, int64_t row0, int64_t n_rows, int64_t group_rows,
            const int32_t* ids, int groups, const float* x, int64_t x_stride, float* y,
            int64_t y_stride, uint8_t* act_scratch);

/// Hyper-connection streams the HC kernels take (their per-stream arrays are this long; the
/// Sinkhorn matrix, n*n entries, fits one warp). CudaForward refuses models with more.
constexpr int kMaxHcStreams = 5;

/// hc_post (model::hc_post, spec §3.3) of a one-group matvec's result y [d] formed in the
/// matvec's epilogue as each row i is stored: out[c*d + i] = y[i]*post[c] + sum over r of
/// comb[c + n_hc*r]*x[r*d + i], r in order (hc_post's formula and order, so the same values).
/// x [n_hc*d], post [n_hc], comb [n_hc*n_hc], out [n_hc*d] (must not overlap x or y).
struct HcPostEpi {
  const float* x = nullptr;
  const float* post = nullptr;
  const float* comb = nullptr;
  int n_hc = 0;
  int64_t d = 0;
  float* out = nullptr;
};

/// One matvec of matvec_pair (fields as matvec's arguments; n_rows rows per group). `act` is
/// the scratch for the quantized input (>= groups * act_row_bytes); act_ready means it already
/// holds x quantized in the weight's activation format.
struct MatvecOp {
  const DevMatrix* w = nullptr;
  int64_t row0 = 0, n_rows = 0, group_rows = 0;
  const int32_t* ids = nullptr;
  int groups = 1;
  const float* x = nullptr;
  int64_t x_stride = 0;
  float* y = nullptr;
  int64_t y_stride = 0;
  uint8_t* act = nullptr;
  bool act_ready = false;
  /// ids were written before the launch preceding this one on the stream, and that launch
  /// waits for its own predecessors before letting this one start (PDL): the row-slice kernel
  /// may then fetch the listed groups' first weight blocks before its wait.
  bool ids_early = false;
  /// When set, the launch also forms hc_post of y (*post, see HcPostEpi) in its epilogue (the
  /// streaming and chunked kernels; K-quant weights then stream instead of taking the row-slice
  /// kernel), or with a shape the epilogue does not take (groups != 1, row0 != 0, n_rows !=
  /// post->d, n_hc > kMaxHcStreams) in an hc_post launch after it: the same values either way.
  /// matvec_op only (matvec_pair runs an op with a post as its own launch).
  const HcPostEpi* post = nullptr;
};

/// Activation format of a weight type's matvec input (quant::activation_type): F32 for
/// F32/F16/BF16, Q8_0 for Q8_0/MXFP4, Q8_K for Q2_K/Q4_K/IQ2_XXS, Bad otherwise.
enum class ActFormat { F32, Q8_0, Q8_K, Bad };
ActFormat act_format(uint32_t type);

/// One matvec described by `op` (as matvec; with op.act_ready the input already sits quantized
/// in op.act and op.x is not read).
void matvec_op(const MatvecOp& op);

/// The down projection of SwiGLU rows (model::expert_swiglu, then the matvec of op.w): group g's
/// input is swiglu(gate[g*n..], up[g*n..], clamp) * gate_w[g] (gate_w null: 1) with n = op.w->cols,
/// quantized straight into op.act in the weight's activation format (one launch instead of a
/// SwiGLU and a quantization); for float weights the f32 values go to `mid` [groups * n] and
/// the matvec reads them. op.x and op.x_stride are ignored. Same results as swiglu + matvec.
void swiglu_matvec(MatvecOp op, const float* gate, const float* up, float clamp, const float* gate_w,
                   float* mid);

/// Two matvecs in one launch when their weights share a type and group count (else two
/// launches); when both read the same x, it is quantized once (into a.act). Same results as two
/// matvec calls.
void matvec_pair(const MatvecOp& a, const MatvecOp& b);

/// One multi-token matvec ("matmat", prefill): for group g in [0, groups) (weight rows
/// row0 + g*group_rows + r, r in [0, n_rows)) and each of its entries e,
///   y[e*y_stride + g*y_gstride + r] = vec_dot(W row, input row i),  i = (e / in_div)*in_mul + g*in_gmul,
/// where input row i is x + i*x_stride (f32, W.cols values; n_in rows in all). Dense mode
/// (cnt null): the entries of every group are 0..n_tok-1. List mode: group g's entries are
/// list[g*list_stride + k], k < cnt[g] (device arrays; e.g. g = expert id, e = token*n_used +
/// slot); a group with no entries costs one empty block per row block. The inputs are quantized
/// into `act` (>= n_in * act_row_bytes(W.type, W.cols) bytes) in the weight's activation format
/// unless act_ready (float weights read x directly). Each weight row is read once per 32
/// entries. Every value equals matvec's (and quant::vec_dot's) bit for bit: same activation
/// quantization, same per-lane operations in the same order, same final tree.
struct MatmatOp {
  const DevMatrix* w = nullptr;
  int64_t row0 = 0, n_rows = 0, group_rows = 0;
  int groups = 1;
  int n_tok = 0;
  const int32_t* cnt = nullptr;
  const int32_t* list = nullptr;
  int64_t list_stride = 0;
  int64_t in_div = 1, in_mul = 1, in_gmul = 0;
  const float* x = nullptr;
  int64_t x_stride = 0;
  int n_in = 0;
  float* y = nullptr;
  int64_t y_stride = 0, y_gstride = 0;
  uint8_t* act = nullptr;
  bool act_ready = false;
};

/// The grouped-input MatmatOp (the attention output projection's form, spec §3.4.9): group g of
/// token k reads input row k*groups + g (x + (k*groups + g)*x_stride, w.cols f32 values) and
/// weight rows g*rows .. g*rows + rows - 1, and writes y[k*y_stride + g*rows + r]. `act` holds
/// the n_tok*groups quantized input rows. No device work; run it with matmat.
inline MatmatOp grouped_matmat_op(const DevMatrix& w, int64_t rows, int groups, int n_tok, const float* x,
                                  int64_t x_stride, float* y, int64_t y_stride, uint8_t* act) {
  MatmatOp o;
  o.w = &w;
  o.n_rows = o.group_rows = rows;
  o.groups = groups;
  o.n_tok = n_tok;
  o.in_mul = groups;
  o.in_gmul = 1;
  o.x = x;
  o.x_stride = x_stride;
  o.n_in = n_tok * groups;
  o.y = y;
  o.y_stride = y_stride;
  o.y_gstride = rows;
  o.act = act;
  return o;
}

/// Runs one MatmatOp (see there); nothing for an empty op. One launch (plus the quantization).
void matmat(const MatmatOp& op);

/// Quantizes n_rows f32 rows (x + i*x_stride, cols values) into consecutive activation rows of
/// act_row_bytes(type, cols) bytes at `act`, in the activation format of weights of `type`
/// (quant::quantize_q8_0_act / quantize_q8_k); a no-op for float weight types.
void quantize_rows(uint32_t type, const float* x, int64_t x_stride, int64_t cols, int n_rows, uint8_t* act);

/// Groups the n entries of sel (expert ids) by expert for matmat's list mode: cnt [n_expert]
/// (zeroed here, then the entry count of each expert) and list[e*stride + k] = the indices i
/// with sel[i] == e (stride >= n; order unspecified). Ids outside [0, n_expert) are skipped.
void group_by_expert(const int32_t* sel, int n, int n_expert, int32_t* cnt, int32_t* list, int64_t stride);

/// RMSNorm of `n_rows` rows of `dim` (model::rms_norm / rms_norm_unweighted / rms_norm_heads):
/// out = x * (1/sqrt(mean(x^2) + eps)) [* weight]; weight may be null; out may equal x. With
/// q8_0 non-null (and dim % 32 == 0) the normed rows are also quantized there as Q8_0
/// activation rows (dim/32 blocks of 36 bytes each), ready for a Q8_0/MXFP4 matvec.
void rms_norm(const float* x, const float* weight, float* out, int64_t dim, int n_rows, float eps,
              uint8_t* q8_0 = nullptr);

/// hc_pre_weights' arguments (hc_pre_args), also what hc_norm_matvec takes to run it in the block
/// that forms the pre mixes.
struct HcPreArgs {
  const float* scale = nullptr;
  const float* base = nullptr;
  int n_hc = 0;
  float eps = 0.0f;
  const float* x = nullptr;
  int64_t d = 0;
  float* pre = nullptr;
  float* sub_in = nullptr;
  const float* norm_w = nullptr;
  float norm_eps = 0.0f;
  float* h = nullptr;
  uint8_t* h_q8_0 = nullptr;
  uint8_t* h_q8_k = nullptr;
};
/// The arguments of hc_pre_weights: scale, base, eps and n_hc (<= kMaxHcStreams) of the HC split, the
/// streams x [n_hc*d], the outputs pre [n_hc], sub_in [d] and (norm_w non-null) h [d] with its
/// norm_eps, and the quantized rows h_q8_0 / h_q8_k (may be null; dropped unless norm_w is set
/// and d is a multiple of 32 / 256).
HcPreArgs hc_pre_args(const float* scale, const float* base, int n_hc, float eps, const float* x, int64_t d,
                      float* pre, float* sub_in, const float* norm_w, float norm_eps, float* h, uint8_t* h_q8_0,
                      uint8_t* h_q8_k);
/// HC pre weights (model::hc_split_sinkhorn's pre part + hc_weighted_sum): pre [n_hc] from
/// mix [hc_mix], sub_in [d] = sum_r pre[r] * x[r*d ..], and when norm_w is non-null
/// h [d] = rms_norm(sub_in, norm_w, norm_eps) (the sublayer's input norm), also quantized into
/// h_q8_0 (Q8_0 activation row) and h_q8_k (Q8_K row) when those are set, so the sublayer's
/// matvecs need no quantization launch. With n_tok > 1, token t's arrays start t rows further
/// (mix, x, pre, sub_in, h and the quantized rows).
void hc_pre_weights(const float* mix, const HcPreArgs& a, int n_tok = 1);

/// The rest of model::hc_split_sinkhorn: post [n_hc] and the Sinkhorn-normalised comb
/// [n_hc^2] from mix (one warp; only hc_post needs them, so it can run beside the sublayer).
void hc_sinkhorn(const float* mix, const float* scale, const float* base, int n_hc, int iters, float eps,
                 float* post, float* comb, int n_tok = 1);

/// mix [rows] = (W · x [cols]) * rms_scale(x, eps) for an F32/F16/BF16 matrix (type, data w,
/// row_bytes per row; model::hc_norm_projection, bit for bit: hc_projection's 64 chains and
/// tree), one launch. Returns false (nothing launched) for other types, unaligned pointers, cols
/// not a multiple of 16, rows too long for shared memory (x and one row; with `pre`, x, n_hc
/// rows and norm_w), or a `pre` whose x is not this x of n_hc * d values; the caller then uses
/// hc_norm_matvec_batch (a generic matvec sums in another order), or this without `pre` and
/// hc_pre_weights. With `pre`, the block that forms the first n_hc rows (the pre mixes) also
/// runs hc_pre_weights with those arguments, the same values as a separate hc_pre_weights launch
/// on y (one launch less per sublayer).
bool hc_norm_matvec(uint32_t type, const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols,
                    const float* x, float eps, float* y, const HcPreArgs* pre = nullptr);

/// hc_norm_matvec of n_tok tokens (x [n_tok][cols] -> y [n_tok][rows]), bit-identical to n_tok
/// single calls, in two launches: each token's rms scale into scales [n_tok] (device scratch),
/// then every (row, chain) of kChainTokens tokens per block. Returns false (nothing launched) for
/// other types, unaligned pointers or cols not a multiple of 16 (any row length fits).
bool hc_norm_matvec_batch(uint32_t type, const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols,
                          const float* x, float eps, float* scales, float* y, int n_tok);

/// HC post (model::hc_post): out [n_hc*d] from y [d], x [n_hc*d], post, comb.
void hc_post(const float* y, const float* x, const float* post, const float* comb, int n_hc,
             int64_t d, float* out, int n_tok = 1);

/// Output-head HC collapse (model::hc_output_weights + hc_weighted_sum): z [d].
void hc_output(const float* logits, const float* scale, const float* base, int n_hc, float eps,
               const float* x, int64_t d, float* z, int n_tok = 1);

/// Tail RoPE (model::rope_tail_apply) on `n_heads` heads of `head_dim` values with the angles of
/// position *pos from `table` ([position][cos n_pair, sin n_pair], model::rope_angles).
void rope_tail(float* x, int n_heads, int64_t head_dim, const float* table, int n_pair,
               const int64_t* pos, bool inverse, int n_tok = 1);

/// rms_norm of n_rows rows of dim (weight may be null) then rope_tail at *pos on each row, and,
/// when raw is non-null (n_rows == 1), the KV row store of spec §3.4.2: FP8 round trip on
/// [0, n_fp8), f16 rounding of all dim values, written to ring row *pos % raw_cap of raw (the row
/// itself keeps the rounded values). One launch.
void norm_rope(float* x, const float* weight, int64_t dim, int n_rows, float eps, const float* table,
               int n_pair, const int64_t* pos, int64_t n_fp8, float* raw, int64_t raw_cap, int n_tok = 1);

/// norm_rope(q, nullptr, dim, n_head, ..., n_fp8 = 0, raw = nullptr) on the n_head query heads
/// q [n_head][dim] and norm_rope(kv, kv_weight, dim, 1, ..., n_fp8, raw, raw_cap) on the KV row
/// kv [dim] (spec §3.4.2-3) in one launch of n_head + 1 blocks: the decode step's query norm
/// and its KV row store, with the same results as the two calls.
void q_kv_norm_rope(float* q, int n_head, float* kv, const float* kv_weight, int64_t dim, float eps,
                    const float* table, int n_pair, const int64_t* pos, int64_t n_fp8, float* raw, int64_t raw_cap);

/// norm_rope's KV row path for the n_tok rows x [n_tok][dim] of a prefill chunk (row t at position
/// pos[t]) without the ring store: each row ends as the ring would hold it (FP8 round trip on
/// [0, n_fp8), f16 rounding). kv_ring_store writes them once the chunk's attention has read the
/// older ring rows. One launch.
void kv_norm_rope_rows(float* x, const float* weight, int64_t dim, float eps, const float* table, int n_pair,
                       const int64_t* pos, int64_t n_fp8, int n_tok);

/// Ring store of a chunk's KV rows [n_tok][dim]: row t to ring row pos[t] % raw_cap of raw, for
/// the last min(n_tok, raw_cap) tokens (the earlier ones would be overwritten). One launch.
void kv_ring_store(const float* rows, int64_t dim, const int64_t* pos, float* raw, int64_t raw_cap, int n_tok);

/// y[j] = (sum over slots in `order` of down[slot*d + j], from 0) + shared[j], then hc_post of
/// that y into out [n_hc*d] (one launch).
void moe_combine_hc_post(const float* down, const int32_t* order, int n_used, int64_t d, const float* shared,
                         const float* x, const float* post, const float* comb, int n_hc, float* out,
                         int n_tok = 1);

/// Compressor push (model::Compressor::push, spec §3.4.5 / §3.4.7) of kv / score [width], width
/// = (ratio == 4 ? 2 : 1) * d, in one launch (one block): the APE row (*pos % ratio) added to the
/// score, kv / score written to frontier row (ratio 4: 4 + pos % 4, else pos % ratio); then, when
/// (*pos + 1) % ratio == 0, softmax pooling of the frontier (model::compressor_pool) into `row`
/// [d], RMSNorm with `norm`, tail RoPE at the row's first position (pos + 1 - ratio, angles from
/// rope_table), the FP8 round trip of row[0, n_fp8) (attention rows) or the indexer QAT (indexer
/// rows), f16 rounding into row (pos + 1) / ratio - 1 of `rows`, and for ratio 4 the lane shift
/// of the frontier.
void compressor_push(const float* kv, const float* score, const float* ape, uint32_t ratio, int64_t d,
                     const int64_t* pos, float* state_kv, float* state_score, const float* norm, float eps,
                     const float* rope_table, int n_pair, bool indexer, int64_t n_fp8, float* row, float* rows);

/// The compressor pushes of a prefill chunk's n_tok consecutive positions pos[0] = pos0 .. (rows
/// kv/score [n_tok][width], width = (ratio == 4 ? 2 : 1) * d): as n_tok compressor_push
/// calls, bit for bit (frontier state included), in three launches: the pooled
/// values of the chunk's emissions into pooled [(n_tok / ratio + 1) * d] (each emission's frontier
/// read from the chunk's rows or the state at its start), the state after the chunk, then one
/// block per emission for the norm, RoPE, quantization and the row store.
void compressor_chunk(const float* kv, const float* score, const float* ape, int64_t d, uint32_t ratio,
                      const int64_t* pos, int64_t pos0, int n_tok, float* state_kv, float* state_score,
                      const float* norm, float eps, const float* rope_table, int n_pair, bool indexer, int64_t n_fp8,
                      float* pooled, float* rows);

/// Indexer QAT (model::indexer_qat_row) on n_rows rows of dim (a power of two, dim floats of
/// shared memory per block): Hadamard then FP4 round trip.
void indexer_qat(float* x, int n_rows, int64_t dim);

/// rope_tail(x, n_head, dim, table, n_pair, pos, inverse = false, n_tok) then indexer_qat(x,
/// n_tok * n_head, dim), bit for bit, in one launch (the indexer query of spec §3.4.7: token t's
/// heads at x + t * n_head * dim, position pos[t]; 2 * n_pair <= dim).
void indexer_rope_qat(float* x, int n_head, int64_t dim, const float* table, int n_pair, const int64_t* pos,
                      int n_tok = 1);

/// Token embedding (quant::dequantize_row of row tokens[*pos] of `table`, type F32/F16/BF16/
/// Q8_0, `row_bytes` per row) copied into the n_hc streams of x [n_hc*d]
/// (model::hc_from_embedding).
void embed(const uint8_t* table, uint32_t type, size_t row_bytes, const int32_t* tokens,
           const int64_t* pos, int n_hc, int64_t d, float* x, int n_tok = 1);

/// Fills `n_blocks` blocks at `out` with synth::synth_block(params, i) for i in [0, n_blocks)
/// (seeded synthetic weights, src/backend/synthetic/synthetic_blocks.h).
void synth_fill(const synth::SynthParams& params, uint8_t* out, uint64_t n_blocks);

/// The indexer shapes indexer_scores takes: up to kMaxIndexerHeads heads of kMinIndexerDim ..
/// kMaxIndexerDim values (a power of two; Flash and Pro: 64 heads of 128).
constexpr int kMaxIndexerHeads = 256;
constexpr int64_t kMinIndexerDim = 8, kMaxIndexerDim = 256;

/// Indexer scores (model::indexer_scores) of q [n_head*dim] with head weights w [n_head]
/// against the n = (*pos + 1) / ratio rows [n*dim] into scores [n]; the grid covers max_rows.
/// Throws ds4::Error for a shape outside the limits above.
void indexer_scores(const float* q, const float* w, int n_head, int64_t dim, const float* rows,
                    const int64_t* pos, uint32_t ratio, int64_t max_rows, float* scores);

/// Top-k rows (model::indexer_select_top_k) of the n = (*pos + 1) / ratio scores, ascending row
/// ids into sel [min(n, k)] (one block, radix select on order-preserving keys; max_rows unused).
void indexer_top_k(const float* scores, const int64_t* pos, uint32_t ratio, int64_t max_rows,
                   int64_t k, uint32_t* sel);

/// indexer_scores of n_tok tokens of a prefill chunk in one launch: token t's queries at
/// q + t*n_head*dim, head weights w + t*n_head, position pos[t], scores into scores + t*max_rows
/// (scores holds n_tok * max_rows floats). Bit-identical to n_tok indexer_scores calls.
void indexer_scores_batch(const float* q, const float* w, int n_head, int64_t dim, const float* rows,
                          const int64_t* pos, uint32_t ratio, int64_t max_rows, float* scores, int n_tok);

/// indexer_top_k of n_tok tokens in one launch (one block each): token t's scores at
/// scores + t*max_rows and position pos[t], its k ids into sel + t*k.
void indexer_top_k_batch(const float* scores, const int64_t* pos, uint32_t ratio, int64_t max_rows, int64_t k,
                         uint32_t* sel, int n_tok);

/// Sink attention (model::sink_attention) of q [n_head*dim] at position *pos over the raw window
/// (the last min(pos + 1, n_swa) positions, ring `raw` of raw_cap rows) then the compressed rows
/// of `comp` ((pos + 1) / ratio of them; none for ratio 0) or the n_sel rows listed in `sel`.
/// max_rows bounds window + compressed rows (grid size); scratch holds n_head * max_rows floats.
/// Two launches, both in the CPU's operation order (bit-identical results, exp rounded from
/// f64): the scores of 8 heads x 32 rows per block (each row element loaded once for the 8
/// heads, q in shared memory, dot8's lanes, tree and tail, then the scale), then per block 8
/// heads x 32 output dims (one block per SM, ~126 KiB of shared memory): per chunk of up to 768
/// rows, the V slices copied into shared memory at once (cp.async) while the block makes
/// exp(s - max), then each output value summed over the rows in order by one lane (every V
/// element read once for the 8 heads) while one warp sums the 8 denominators in row order. Any
/// dim, n_head and row count (rows beyond 768 take further chunks in order). With
/// inv_rope_table ([position][cos n_pair, sin n_pair], as rope_tail's table) the second launch
/// also applies rope_tail(out, n_head, dim, inv_rope_table, n_pair, pos, inverse = true) to its
/// outputs, bit for bit (`roped`); not roped (no table, n_pair <= 0, an odd dim or a tail wider
/// than dim): out is the attention alone, for the caller's own rope_tail. With out_q8 and dim a
/// multiple of 32, unless a table was given and declined, the second launch also writes the
/// stored outputs as Q8_0 activation blocks (`quantized`; a null table means the caller applies
/// nothing after this, so a caller with a RoPE of its own to apply must not pass out_q8 then;
/// block b holds outputs 32b..32b+31 of the n_head * dim, BQ8_0Act's 36 bytes each: quant::quantize_q8_0_act of `out` bit for bit,
/// each warp quantizing the 32 values it computed), the input of a Q8_0 output projection
/// without a quantize launch of its own (act_ready). The decode step's form: both launches read
/// the rows written before this step (every window row but position *pos's, every compressed
/// row but one emitted at *pos) before their PDL wait, so those rows and *pos must be complete
/// before the launch that precedes this call on the stream (earlier steps, uploads); with `sel`,
/// or a ring shorter than the window (raw_cap < n_swa), every row is read after the wait.
struct SinkAttentionOut {
  bool roped = false;
  bool quantized = false;
};
SinkAttentionOut sink_attention(const float* q, const float* sinks, int n_head, int64_t dim, const float* raw,
                                int64_t raw_cap, int64_t n_swa, const int64_t* pos, const float* comp,
                                uint32_t ratio, const uint32_t* sel, int64_t n_sel, int64_t max_rows,
                                float* scratch, float* out, const float* inv_rope_table = nullptr, int n_pair = 0,
                                uint8_t* out_q8 = nullptr);

/// Scratch floats per token of a batched sink_attention_batch call (n_tok > 1): the scores of
/// n_head heads x max_rows rows, then the n_head softmax denominators.
int64_t attention_scratch_floats(int n_head, int64_t max_rows);

/// sink_attention of n_tok tokens of a prefill chunk: token t's query at q + t*q_stride, position
/// pos[t], output at out + t*out_stride, scratch + t*attention_scratch_floats(n_head, max_rows)
/// (n_tok of those; n_head * max_rows for n_tok = 1). For n_tok > 1 three launches: the scores
/// (without sel: 4 tokens per block over the union of their rows, each row element loaded once
/// for the 4 tokens x 8 heads, unless DS4_CUDA_ATTN_MULTIQ=0; with sel: one token per block, 8
/// heads x 128 rows, 4 rows per lane), the softmax once per (token, head) (probabilities in
/// place, denominators in row order), then the weighted sums for 8 heads (each V element read
/// once for them: without sel, 4 tokens per block over their union of rows and 2 output dims per
/// thread unless DS4_CUDA_ATTN_MULTIQ_COMBINE=0; with sel, one token and a dim per thread).
/// Window positions >= chunk_pos0 are read from `chunk` (the chunk's KV rows [t][dim], as the
/// ring would hold them) when it is non-null, earlier ones from the ring; the compressed rows are
/// (pos[t]+1)/ratio of them, or, with sel, token t's n_sel rows listed at sel + t*sel_stride.
/// Bit-identical to n_tok sink_attention calls.
void sink_attention_batch(const float* q, int64_t q_stride, const float* sinks, int n_head, int64_t dim,
                          const float* raw, int64_t raw_cap, const float* chunk, int64_t chunk_pos0, int64_t n_swa,
                          const int64_t* pos, const float* comp, uint32_t ratio, const uint32_t* sel,
                          int64_t sel_stride, int64_t n_sel, int64_t max_rows, float* scratch, float* out,
                          int64_t out_stride, int n_tok);

/// Router (spec §3.5): probs from logits [n_expert], selection (hash row tid2eid[tokens[*pos]]
/// when tid2eid is non-null, else biased top-k), weights, and `order` = the slots sorted by
/// expert id (stable). sel/weights/order hold n_used values.
void router(const float* logits, int n_expert, const float* bias, const int32_t* tid2eid,
            const int32_t* tokens, const int64_t* pos, int n_used, float scale, float* probs,
            int32_t* sel, float* weights, int32_t* order, int n_tok = 1);

/// SwiGLU (model::expert_swiglu) of `groups` rows of n: out = silu(g) * u * w[g] (w null: 1).
void swiglu(const float* gate, const float* up, int groups, int64_t n, float clamp,
            const float* w, float* out);

/// Expert parallelism (issue #8): local[s] = sel[s] - begin for the experts this device holds
/// ([begin, end)), else -1, which makes matvec write zeros for that group (n_used <= 32).
void localize_experts(const int32_t* sel, int n_used, int begin, int end, int32_t* local);
/// y[j] = slots[0][j] + slots[1][j] + ... (n_slots rows of n, summed in row order).
void sum_slots(const float* slots, int n_slots, int64_t n, float* y);

/// One thread that sleeps about `us` microseconds on the device (the step profiler queues a
/// step's launches behind it).
void device_sleep(int64_t us);

struct L2Prefetch;  // l2_prefetch.h

/// Whether the current device takes l2_prefetch's bulk prefetches (compute capability >= 9).
bool l2_prefetch_supported();

/// Requests p's ranges (l2_prefetch.h) into L2 with bulk prefetches, about one 32 KiB chunk per
/// thread over blocks of one warp (at most one block per SM), and returns at once; the kernel
/// ends once it has issued them (the copies then complete on their own) and writes nothing.
/// Launched without PDL on the launch stream; call only where l2_prefetch_supported().
/// Throws ds4::Error for more than kL2MaxRanges ranges.
void l2_prefetch(const L2Prefetch& p);

}  // namespace ds4::cuda
