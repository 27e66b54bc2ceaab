// The single source of truth for which tensors a DeepSeek V4 GGUF holds (spec §2.2): names,
// shapes (GGUF order, from the Config, never constants), accepted ggml types, optionality.
// Used by the loader (validate_layout) and by model generators (expected_tensors +
// recipe_type drive gguf::Writer from one loop, see gguf/writer.h).
//
// Type rules:
//   * weight matrices accept F32, F16, BF16, Q8_0; routed experts accept IQ2_XXS, Q2_K, Q4_K
//     and also F32, F16, Q8_0 (so an all-f32 test model loads); 1-D norms, scales, bases,
//     sinks and the router bias are F32; ffn_gate_tid2eid is I32;
//   * the row length (dims[0]) must be a whole number of blocks of the type;
//   * routed gate and up of a layer share one type;
//   * for the real shapes (Config::variant() is Flash or Pro) the types must additionally be
//     exactly ds4's (spec §2.2 table): F16 embedding/HC/compressor/indexer/router, Q8_0
//     attention projections, shared experts and output head, IQ2_XXS/Q2_K/Q4_K routed experts.
// Extra tensors that the layout does not name are an error (decision: a converter that emits
// unexpected names is almost always mis-mapping something, and silently ignoring data hides
// that). blk.N.exp_probs_b.bias is optional; everything else listed is required.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/ggml_type.h"
#include "model/config.h"

namespace ds4::gguf {
class Reader;
}

namespace ds4::model {

/// What a tensor is for; decides its accepted types and the type each recipe writes.
enum class TensorKind {
  TokenEmbedding,  // token_embd.weight
  OutputHead,      // output.weight (untied LM head)
  HcFn,            // hc_attn_fn, hc_ffn_fn, output_hc_fn (hyper-connection projections)
  AttentionProj,   // attn_q_a, attn_q_b, attn_kv, attn_output_a, attn_output_b
  Compressor,      // attn_compressor_{ape,kv,gate}
  Indexer,         // indexer.attn_q_b, indexer.proj, indexer_compressor_{ape,kv,gate}
  Router,          // ffn_gate_inp
  SharedExpert,    // ffn_{gate,up,down}_shexp
  RoutedGateUp,    // ffn_gate_exps, ffn_up_exps
  RoutedDown,      // ffn_down_exps
  Vector,          // 1-D F32: norms, HC scales/bases, attention sinks, exp_probs_b bias
  HashTable,       // ffn_gate_tid2eid (I32 expert ids per token)
};

/// One tensor the model expects.
struct TensorSpec {
  std::string name;              // e.g. "blk.3.attn_q_a.weight"
  std::vector<uint64_t> shape;   // GGUF order, dims[0] innermost
  TensorKind kind;
  std::vector<GgmlType> accepted;  // types any shape accepts
  std::vector<GgmlType> exact;     // ds4's types for the real Flash/Pro shapes (subset of accepted)
  bool optional = false;         // may be absent (exp_probs_b.bias)
  int layer = -1;                // block index, -1 for global tensors
};

/// Every tensor of the model described by `config` (which must be valid), in the order a
/// generator should write them: token_embd, then per layer (spec §2.2 order: HC attention,
/// attention, compressor if ratio != 0, indexer if ratio == 4, HC FFN, router, bias, routed
/// experts, shared expert, hash table if il < hash_layer_count), then the output head tensors.
std::vector<TensorSpec> expected_tensors(const Config& config);

/// Quantization recipe of a generated model (spec §2.2 "Shipped GGUF recipes").
enum class Recipe {
  q2,   // routed gate/up IQ2_XXS, routed down Q2_K; Q8_0 attention/shared/output; F16 rest
  q4,   // routed experts Q4_K; otherwise as q2
  f32,  // every float weight F32 (hash table stays I32)
};

/// "q2", "q4", "f32".
std::string_view recipe_name(Recipe r);
/// Parses a recipe name; std::nullopt when unknown.
std::optional<Recipe> parse_recipe(std::string_view name);

/// The type a generator writes for `spec` under `recipe` (always one of spec.accepted, and of
/// spec.exact for q2/q4).
GgmlType recipe_type(const TensorSpec& spec, Recipe recipe);

/// Checks the file's tensors against expected_tensors(config): presence, type (accepted, and
/// exact for real shapes), shape, whole-block rows, gate/up type equality, and no tensor
/// beyond the layout. Throws one ds4::Error listing every problem (at most 50 lines, then a
/// count): "<file>: tensor layout does not match the custom model (3 problems):\n  - ...".
void validate_layout(const Config& config, const gguf::Reader& reader);

}  // namespace ds4::model
