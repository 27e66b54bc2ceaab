// Streaming KV compressor of the compressed-attention layers (model-spec §3.4.5, §4.1, §4.2).
//
// Every ratio-R layer turns each group of R consecutive tokens into one compressed KV row.
// The backend projects the attention-normed input h of token p into
//   k_p = W_ckv * h              (width coff*D values, coff = 2 for R == 4, else 1)
//   s_p = W_cgate * h + APE[p mod R]   (compressor_add_ape)
// and calls Compressor::push(k_p, s_p, p, norm, row). When (p + 1) % R == 0 push emits
// compressed row c = (p + 1)/R - 1: a per-dimension softmax pool over the window's
// candidates, RMSNorm with the compressor norm weight, tail RoPE at the window's first
// position p + 1 - R with the layer's RoPE, then FP8 (attention rows) or Hadamard + FP4
// (indexer rows). Storing the row (the CPU reference rounds it to f16) is the cache's job.
//
// Ratio 4 uses overlapping windows: the 8 x 2D frontier keeps the previous window in rows 0..3
// (their first halves [0, D) are candidates) and the current one in rows 4..7 (second halves
// [D, 2D)); after each emission rows 0..3 := rows 4..7 and rows 4..7 := the same copy.
// Initial state: kv = 0, score = -1e30 (empty); a dimension whose candidates all score
// <= -5e29 pools to 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "model/norms.h"
#include "model/rope.h"

namespace ds4::model {

/// Score of an empty frontier row ("-inf" of the reference).
inline constexpr float kCompressorEmptyScore = -1.0e30f;

/// What happens to an emitted row after RMSNorm and RoPE.
enum class CompressedRowKind {
  kAttention,  ///< FP8 round trip on dims [0, D - n_rot) (spec §3.4.4); D = 512 in the model
  kIndexer,    ///< Hadamard + FP4 on all D dims (D = 128 in the real model) (spec §3.4.7)
};

/// Shape and post-processing of one compressor.
struct CompressorParams {
  uint32_t ratio = 0;     ///< R: tokens per compressed row (4 or 128 in the model)
  uint32_t head_dim = 0;  ///< D: width of an emitted row (512 attention, 128 indexer)
  CompressedRowKind kind = CompressedRowKind::kAttention;
  RopeParams rope;        ///< the layer's RoPE (rope_params_for_layer(config, ratio))
  float eps = kRmsEps;    ///< RMSNorm eps
};

/// coff: 2 for the overlapping ratio-4 windows, 1 otherwise.
constexpr uint32_t compressor_overlap(uint32_t ratio) { return ratio == 4 ? 2u : 1u; }

/// Adds the absolute position embedding row APE[pos mod R] to a gate projection in place.
/// ape: `*_compressor_ape` as R rows of `width` values (GGUF [width, R]); score: width values.
/// Throws ds4::Error on size mismatch or ratio == 0.
void compressor_add_ape(std::span<float> score, std::span<const float> ape, uint32_t ratio,
                        uint32_t pos);

/// Pools a full frontier (spec §3.4.5 emission step): for each dim j in [0, D),
/// out[j] = sum_i softmax_i(score_i) * kv_i over the window's candidates (R rows for R != 4;
/// rows 0..3 at column j and rows 4..7 at column D + j for R == 4), f32, max-subtracted,
/// 0 when every candidate scores <= -5e29. state_kv, state_score: coff*R rows of coff*D
/// (row-major); out: D values. Throws ds4::Error on size mismatch.
void compressor_pool(std::span<const float> state_kv, std::span<const float> state_score,
                     uint32_t ratio, std::span<float> out);

/// Post-processes a pooled row in place: RMSNorm with norm_weight (D values), tail RoPE at
/// first_pos (= p + 1 - R) with params.rope, then the quantisation of params.kind.
/// Throws ds4::Error on size mismatch or invalid params (see Compressor).
void compressor_finish_row(std::span<float> row, std::span<const float> norm_weight,
                           const CompressorParams& params, uint32_t first_pos);

/// The frontier state of one compressor of one layer. Allocates its state once at
/// construction; push() does not allocate.
class Compressor {
 public:
  /// Throws ds4::Error when ratio == 0, head_dim < rope.n_rot, rope is unset, an attention
  /// compressor's D - n_rot is not a multiple of 64, or an indexer compressor's D != 128.
  explicit Compressor(const CompressorParams& params);

  const CompressorParams& params() const { return params_; }
  /// coff * D: length of the k_p and s_p vectors push() takes, and of a state row.
  size_t width() const { return width_; }
  /// coff * R: rows in each state array.
  size_t state_rows() const { return rows_; }
  /// Tokens consumed so far, i.e. the position the next push() must carry.
  uint32_t n_tokens() const { return n_tokens_; }
  /// Compressed rows emitted so far: floor(n_tokens / R).
  uint32_t n_emitted() const { return n_tokens_ / params_.ratio; }

  /// Consumes token `pos` (must equal n_tokens()): writes kv/score (width() values each, score
  /// already including the APE) into frontier row (R == 4 ? 4 + pos%4 : pos%R). If
  /// (pos + 1) % R == 0, writes the finished compressed row to out_row (D values) and returns
  /// true; otherwise leaves out_row untouched and returns false. norm_weight: D values
  /// (`*_compressor_norm`). Throws ds4::Error on a size mismatch or out-of-order position.
  bool push(std::span<const float> kv, std::span<const float> score, uint32_t pos,
            std::span<const float> norm_weight, std::span<float> out_row);

  /// After a prefill of n_tokens() tokens, resets frontier rows that will be overwritten before
  /// they are read (R == 4: rows 4 + n%4 .. 7; otherwise n%R .. R-1) to kv 0 / score -1e30, so
  /// snapshots match the reference byte for byte (spec §4.2). Does not change any output.
  void finish_prefill();

  /// Frontier arrays for snapshots (spec §4.3): state_rows() x width() f32 each, row-major.
  std::span<const float> state_kv() const { return kv_; }
  std::span<const float> state_score() const { return score_; }

  /// Loads a snapshot: both arrays (state_rows() x width() each) and the token count.
  /// Throws ds4::Error on a size mismatch.
  void restore(std::span<const float> state_kv, std::span<const float> state_score,
               uint32_t n_tokens);

  /// Back to the initial state (no tokens; kv 0, score -1e30).
  void reset();

 private:
  CompressorParams params_;
  size_t width_;
  size_t rows_;
  uint32_t n_tokens_ = 0;
  std::vector<float> kv_;
  std::vector<float> score_;
};

}  // namespace ds4::model
