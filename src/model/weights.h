// The model's tensors bound by name (spec §2.2) as zero-copy views into the mapped GGUF, plus
// small f32 copies of the 1-D vectors (norms, HC scales/bases, sinks, router bias) and of the
// compressor position embeddings, which are tiny and read per token.
// Bind only after model::validate_layout() accepted the file: binding trusts names, types and
// shapes and only re-checks what it relies on.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/ggml_type.h"
#include "model/config.h"

namespace ds4::gguf {
class Reader;
}

namespace ds4::model {

/// A weight matrix (or expert stack) inside the mapping: `rows` rows of `cols` elements of
/// `type`, row r at data + r * row_bytes. A 3-D expert tensor [cols, rows_per_expert, E] has
/// rows = rows_per_expert * E (expert-major, spec §2.2).
struct Matrix {
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t cols = 0;
  int64_t rows = 0;
  size_t row_bytes = 0;
  std::string name;

  explicit operator bool() const { return data != nullptr; }
  /// Pointer to row r.
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
};

/// Tensors of one layer `blk.{il}.*`. Optional ones (compressor, indexer, bias, hash table)
/// are empty when the layer has none.
struct LayerWeights {
  // hyper-connections around attention and FFN (spec §3.3)
  Matrix hc_attn_fn;                 // [hc_dim, mix]
  std::vector<float> hc_attn_scale;  // [3]
  std::vector<float> hc_attn_base;   // [mix]
  Matrix hc_ffn_fn;
  std::vector<float> hc_ffn_scale;
  std::vector<float> hc_ffn_base;
  // attention (spec §3.4)
  std::vector<float> attn_norm;      // [n_embd]
  Matrix attn_q_a;                   // [n_embd, q_lora]
  std::vector<float> attn_q_a_norm;  // [q_lora]
  Matrix attn_q_b;                   // [q_lora, n_head*head_dim]
  Matrix attn_kv;                    // [n_embd, head_dim]
  std::vector<float> attn_kv_a_norm; // [head_dim]
  std::vector<float> attn_sinks;     // [n_head]
  Matrix attn_output_a;              // [group_in, n_group*o_lora]
  Matrix attn_output_b;              // [n_group*o_lora, n_embd]
  // attention compressor (ratio != 0) and indexer (ratio 4), spec §3.4.5, §3.4.7
  std::vector<float> comp_ape;       // [width, R] as R rows of width
  Matrix comp_kv;                    // [n_embd, width]
  Matrix comp_gate;                  // [n_embd, width]
  std::vector<float> comp_norm;      // [head_dim]
  Matrix idx_q_b;                    // [q_lora, idx_heads*idx_dim]
  Matrix idx_proj;                   // [n_embd, idx_heads]
  std::vector<float> idx_comp_ape;   // [2*idx_dim, 4]
  Matrix idx_comp_kv;                // [n_embd, 2*idx_dim]
  Matrix idx_comp_gate;
  std::vector<float> idx_comp_norm;  // [idx_dim]
  // FFN (spec §3.5)
  std::vector<float> ffn_norm;       // [n_embd]
  Matrix ffn_gate_inp;               // [n_embd, n_expert]
  std::vector<float> exp_probs_b;    // [n_expert] or empty
  Matrix ffn_gate_exps;              // [n_embd, n_ff, n_expert]
  Matrix ffn_up_exps;
  Matrix ffn_down_exps;              // [n_ff, n_embd, n_expert]
  Matrix ffn_gate_shexp;             // [n_embd, n_ff]
  Matrix ffn_up_shexp;
  Matrix ffn_down_shexp;             // [n_ff, n_embd]
  std::vector<int32_t> tid2eid;      // [n_used, n_vocab] for hash layers, else empty
};

/// Every tensor the forward pass reads.
struct Weights {
  Matrix token_embd;                   // [n_embd, n_vocab]: row per token id
  Matrix output_hc_fn;                 // [hc_dim, n_hc]
  std::vector<float> output_hc_scale;  // [1]
  std::vector<float> output_hc_base;   // [n_hc]
  std::vector<float> output_norm;      // [n_embd]
  Matrix output;                       // [n_embd, n_vocab]
  std::vector<LayerWeights> layers;
  uint64_t matrix_bytes = 0;           // bytes of all mapped matrices (what a decode step reads at most)
};

/// Binds every tensor of `config`'s layout from `reader` (which must outlive the Weights).
/// Throws ds4::Error naming the tensor if one is missing or has an unusable type/shape
/// (validate_layout() reports such problems more completely; call it first).
Weights bind_weights(const Config& config, const gguf::Reader& reader);

}  // namespace ds4::model
