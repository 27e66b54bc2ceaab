// DeepSeek V4 hyperparameters (spec §1.1, §1.3) read from `deepseek4.*` GGUF metadata.
// Shapes come from metadata, never from constants, so a tiny test model loads through the same
// code as the real one. Validation has two levels:
//   * general invariants that any shape must satisfy (positive dims, K = V, one KV head, RoPE
//     dims even and within both head widths, output groups dividing the heads, ratios in
//     {0, 4, 128}, ...);
//   * the real models: metadata with block_count 43 and embedding_length 4096 claims to be
//     DeepSeek V4 Flash, 61/7168 DeepSeek V4 Pro; then every value must equal that model's
//     exactly, like ds4 does (floats within relative 1e-6; ds4's own check is absolute below
//     magnitude 1, which cannot tell an epsilon of 1e-6 from 2e-6, so ours is stricter there).
// Every violation is collected and reported in one ds4::Error.
//
// PRO values: not in the spec. Taken from antirez/ds4 forks that support Pro (`DS4_SHAPE_PRO`,
// `ds4_expected_layer_compress_ratio`: layers 0 and 1 use ratio 128, then 4/128 alternating)
// and agree with public descriptions of the DeepSeek-V4-Pro config.json (61 layers, hidden 7168,
// 128 heads, q_lora 1536, 16 output groups, 384 experts / 6 used, expert ff 3072, indexer
// top-k 1024, route scale 2.5).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::gguf {
class Reader;
class Writer;
}  // namespace ds4::gguf

namespace ds4::model {

/// GGUF metadata keys of spec §1.3.
namespace keys {
inline constexpr const char* kBlockCount = "deepseek4.block_count";
inline constexpr const char* kEmbeddingLength = "deepseek4.embedding_length";
inline constexpr const char* kVocabSize = "deepseek4.vocab_size";
inline constexpr const char* kHeadCount = "deepseek4.attention.head_count";
inline constexpr const char* kHeadCountKv = "deepseek4.attention.head_count_kv";
inline constexpr const char* kKeyLength = "deepseek4.attention.key_length";
inline constexpr const char* kValueLength = "deepseek4.attention.value_length";
inline constexpr const char* kRopeDimensionCount = "deepseek4.rope.dimension_count";
inline constexpr const char* kQLoraRank = "deepseek4.attention.q_lora_rank";
inline constexpr const char* kOutputLoraRank = "deepseek4.attention.output_lora_rank";
inline constexpr const char* kOutputGroupCount = "deepseek4.attention.output_group_count";
inline constexpr const char* kExpertCount = "deepseek4.expert_count";
inline constexpr const char* kExpertUsedCount = "deepseek4.expert_used_count";
inline constexpr const char* kExpertFeedForwardLength = "deepseek4.expert_feed_forward_length";
inline constexpr const char* kExpertSharedCount = "deepseek4.expert_shared_count";
inline constexpr const char* kHashLayerCount = "deepseek4.hash_layer_count";
inline constexpr const char* kExpertGroupCount = "deepseek4.expert_group_count";
inline constexpr const char* kExpertGroupUsedCount = "deepseek4.expert_group_used_count";
inline constexpr const char* kSlidingWindow = "deepseek4.attention.sliding_window";
inline constexpr const char* kIndexerHeadCount = "deepseek4.attention.indexer.head_count";
inline constexpr const char* kIndexerKeyLength = "deepseek4.attention.indexer.key_length";
inline constexpr const char* kIndexerTopK = "deepseek4.attention.indexer.top_k";
inline constexpr const char* kHcCount = "deepseek4.hyper_connection.count";
inline constexpr const char* kHcSinkhornIterations = "deepseek4.hyper_connection.sinkhorn_iterations";
inline constexpr const char* kHcEpsilon = "deepseek4.hyper_connection.epsilon";
inline constexpr const char* kCompressRatios = "deepseek4.attention.compress_ratios";
inline constexpr const char* kSwigluClampExp = "deepseek4.swiglu_clamp_exp";
inline constexpr const char* kRopeOrigCtx = "deepseek4.rope.scaling.original_context_length";
inline constexpr const char* kRopeFreqBase = "deepseek4.rope.freq_base";
inline constexpr const char* kRopeScalingFactor = "deepseek4.rope.scaling.factor";
inline constexpr const char* kRopeYarnBetaFast = "deepseek4.rope.scaling.yarn_beta_fast";
inline constexpr const char* kRopeYarnBetaSlow = "deepseek4.rope.scaling.yarn_beta_slow";
inline constexpr const char* kCompressRopeFreqBase = "deepseek4.attention.compress_rope_freq_base";
inline constexpr const char* kExpertWeightsScale = "deepseek4.expert_weights_scale";
inline constexpr const char* kRmsEpsilon = "deepseek4.attention.layer_norm_rms_epsilon";
inline constexpr const char* kExpertWeightsNorm = "deepseek4.expert_weights_norm";
inline constexpr const char* kContextLength = "deepseek4.context_length";
}  // namespace keys

/// A known real model, recognised from its metadata values.
enum class Variant { Custom, Flash, Pro };

/// "DeepSeek V4 Flash", "DeepSeek V4 Pro" or "custom".
std::string_view variant_name(Variant v);

/// Every `deepseek4.*` hyperparameter (spec §1.3) plus derived sizes. Field comments name the
/// metadata key suffix after "deepseek4.".
struct Config {
  uint32_t n_layer = 0;            // block_count
  uint32_t n_embd = 0;             // embedding_length (hidden size)
  uint32_t n_vocab = 0;            // vocab_size
  uint32_t n_head = 0;             // attention.head_count (query heads)
  uint32_t n_head_kv = 0;          // attention.head_count_kv (must be 1: one shared K = V row)
  uint32_t head_dim = 0;           // attention.key_length
  uint32_t value_dim = 0;          // attention.value_length (== head_dim)
  uint32_t n_rot = 0;              // rope.dimension_count (tail RoPE dims per head)
  uint32_t q_lora_rank = 0;        // attention.q_lora_rank
  uint32_t o_lora_rank = 0;        // attention.output_lora_rank (per output group)
  uint32_t n_out_group = 0;        // attention.output_group_count
  uint32_t n_expert = 0;           // expert_count (routed experts)
  uint32_t n_expert_used = 0;      // expert_used_count (active routed experts per token)
  uint32_t n_ff_exp = 0;           // expert_feed_forward_length (routed and shared)
  uint32_t n_expert_shared = 0;    // expert_shared_count (must be 1)
  uint32_t n_hash_layer = 0;       // hash_layer_count (layers 0..n-1 route by token id)
  std::optional<uint32_t> n_expert_group;       // expert_group_count (optional; 0 if present)
  std::optional<uint32_t> n_expert_group_used;  // expert_group_used_count (optional; 0 if present)
  uint32_t n_swa = 0;              // attention.sliding_window (raw rows incl. current token)
  uint32_t n_indexer_head = 0;     // attention.indexer.head_count
  uint32_t indexer_head_dim = 0;   // attention.indexer.key_length
  uint32_t indexer_top_k = 0;      // attention.indexer.top_k
  uint32_t n_hc = 0;               // hyper_connection.count (streams)
  uint32_t hc_sinkhorn_iter = 0;   // hyper_connection.sinkhorn_iterations
  float hc_eps = 0;                // hyper_connection.epsilon
  std::vector<uint32_t> compress_ratios;  // attention.compress_ratios, one per layer: 0, 4 or 128
  std::vector<float> swiglu_clamp;        // swiglu_clamp_exp, one per layer
  uint64_t rope_orig_ctx = 0;      // rope.scaling.original_context_length (YaRN)
  float rope_freq_base = 0;        // rope.freq_base (ratio-0 layers)
  float rope_scale_factor = 0;     // rope.scaling.factor (YaRN, compressed layers)
  float rope_yarn_beta_fast = 0;   // rope.scaling.yarn_beta_fast
  float rope_yarn_beta_slow = 0;   // rope.scaling.yarn_beta_slow
  float compress_rope_freq_base = 0;  // attention.compress_rope_freq_base (compressed layers)
  float expert_weight_scale = 0;   // expert_weights_scale (routed output multiplier)
  float rms_eps = 0;               // attention.layer_norm_rms_epsilon
  bool expert_weights_norm = false;  // expert_weights_norm
  std::optional<uint64_t> context_length;  // context_length (informational, not validated)

  // ---- derived sizes (spec §2.2 notation) ----
  /// Hyper-connection state width: n_hc * n_embd (16384 for Flash).
  uint64_t hc_dim() const { return uint64_t{n_hc} * n_embd; }
  /// HC control vector length: 2*n_hc + n_hc*n_hc (pre, post, comb; 24 for n_hc = 4).
  uint32_t hc_mix() const { return 2 * n_hc + n_hc * n_hc; }
  /// Query width: n_head * head_dim (32768 for Flash).
  uint64_t q_dim() const { return uint64_t{n_head} * head_dim; }
  /// Heads per output group: n_head / n_out_group (8 for Flash).
  uint32_t heads_per_group() const { return n_out_group ? n_head / n_out_group : 0; }
  /// Input width of one output group: heads_per_group * head_dim (4096 for Flash).
  uint64_t group_in_dim() const { return uint64_t{heads_per_group()} * head_dim; }
  /// Concatenated low-rank output width: n_out_group * o_lora_rank (8192 for Flash).
  uint64_t out_low_dim() const { return uint64_t{n_out_group} * o_lora_rank; }
  /// Non-RoPE dims per head: head_dim - n_rot (448 for Flash).
  uint32_t nope_dim() const { return head_dim - n_rot; }
  /// Indexer query width: n_indexer_head * indexer_head_dim (8192 for Flash).
  uint64_t indexer_q_dim() const { return uint64_t{n_indexer_head} * indexer_head_dim; }
  /// Compression ratio of layer `il` (0, 4 or 128). Throws ds4::Error if il >= n_layer.
  uint32_t compress_ratio(uint32_t il) const;
  /// Attention compressor width of layer `il`: (ratio == 4 ? 2 : 1) * head_dim (spec §3.4.5);
  /// 0 for ratio-0 layers.
  uint64_t compressor_width(uint32_t il) const;
  /// Indexer compressor width: 2 * indexer_head_dim (ratio-4 layers only).
  uint64_t indexer_compressor_width() const { return 2ull * indexer_head_dim; }
  /// True when layer `il` routes by token id through ffn_gate_tid2eid (il < n_hash_layer).
  bool is_hash_layer(uint32_t il) const { return il < n_hash_layer; }
  /// SwiGLU clamp of layer `il`. Throws ds4::Error if il >= n_layer.
  float swiglu_clamp_of(uint32_t il) const;

  /// The real model these values claim to be: Flash when block_count == 43 and
  /// embedding_length == 4096, Pro when 61 and 7168, otherwise Custom.
  Variant variant() const;

  /// Every violated rule (general invariants, plus the exact values when variant() is Flash or
  /// Pro), one line each; empty when valid.
  std::vector<std::string> problems() const;
  /// Throws ds4::Error "<source>: invalid DeepSeek V4 configuration (N problems):\n  - ..."
  /// listing every problem.
  void validate(std::string_view source = "config") const;

  /// Reads every key with ds4's type rules (u32 keys need u32; u64 accepts u64/u32; f32
  /// accepts f32/f64/u32/i32; bool needs bool; compress_ratios needs an i32/u32 array with
  /// >= block_count entries, swiglu_clamp_exp an f32/f64 array with >= block_count entries;
  /// the first block_count entries are used), then validate(). Every missing/mistyped key is
  /// reported in one ds4::Error naming the file; if all keys read, every invariant violation is
  /// reported in one ds4::Error the same way.
  static Config from_gguf(const gguf::Reader& reader);

  /// Writes every key (compress_ratios as i32 array, swiglu_clamp_exp as f32 array,
  /// original_context_length and context_length as u64; optional keys only when set).
  void write_metadata(gguf::Writer& writer) const;

  /// The real DeepSeek V4 Flash values (spec §1.1/§1.3).
  static Config flash();
  /// The real DeepSeek V4 Pro values (see the file comment for the source).
  static Config pro();
  /// A 7-layer test model exercising every layer kind: ratios 0,0,4,128,4,128,4; 3 hash
  /// layers; hidden 256; 4 heads x 64 with 16 RoPE dims; window 16; indexer 4 heads x 32,
  /// top-k 8; 16 experts, 3 used, ff 256; HC 4 with 20 Sinkhorn iterations; q_lora 64,
  /// o_lora 32, 2 output groups; everything else as Flash.
  static Config tiny(uint32_t n_vocab);
  /// ds4-nano, the trained small model shipped with the engine (docs/nano.md): the full
  /// 129280-token vocabulary; 6 layers with ratios 0,0,4,128,4,128; 2 hash layers; hidden
  /// 256; 4 heads x 128 with 32 RoPE dims; window 128; indexer 4 heads x 64, top-k 32;
  /// 4 experts, 2 used, ff 256; HC 4 with 20 Sinkhorn iterations; q_lora 128, o_lora 64,
  /// 2 output groups; everything else as Flash. Twin of NANO_SHAPE in tools/train/train_nano.py.
  static Config nano();

  friend bool operator==(const Config&, const Config&) = default;
};

}  // namespace ds4::model
