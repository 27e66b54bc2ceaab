#include "model/layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "common/error.h"
#include "gguf/reader.h"

namespace ds4::model {

namespace {

using T = GgmlType;

std::vector<GgmlType> accepted_types(TensorKind kind) {
  switch (kind) {
    case TensorKind::RoutedGateUp:
    case TensorKind::RoutedDown:
      return {T::IQ2_XXS, T::Q2_K, T::Q4_K, T::F32, T::F16, T::Q8_0};
    case TensorKind::Vector: return {T::F32};
    case TensorKind::HashTable: return {T::I32};
    case TensorKind::HcFn: return {T::F32, T::F16, T::BF16};  // model::hc_projection reads floats
    default: return {T::F32, T::F16, T::BF16, T::Q8_0};
  }
}

// ds4's exact types (spec §2.2 table).
std::vector<GgmlType> exact_types(TensorKind kind) {
  switch (kind) {
    case TensorKind::TokenEmbedding:
    case TensorKind::HcFn:
    case TensorKind::Compressor:
    case TensorKind::Indexer:
    case TensorKind::Router:
      return {T::F16};
    case TensorKind::OutputHead:
    case TensorKind::AttentionProj:
    case TensorKind::SharedExpert:
      return {T::Q8_0};
    case TensorKind::RoutedGateUp:
    case TensorKind::RoutedDown:
      return {T::IQ2_XXS, T::Q2_K, T::Q4_K};
    case TensorKind::Vector: return {T::F32};
    case TensorKind::HashTable: return {T::I32};
  }
  return {};
}

class Builder {
 public:
  void add(std::string name, TensorKind kind, std::vector<uint64_t> shape, int layer, bool optional = false) {
    specs.push_back(TensorSpec{std::move(name), std::move(shape), kind, accepted_types(kind), exact_types(kind),
                               optional, layer});
  }
  void layer(int il, const char* suffix, TensorKind kind, std::vector<uint64_t> shape, bool optional = false) {
    add(fmt::format("blk.{}.{}", il, suffix), kind, std::move(shape), il, optional);
  }
  std::vector<TensorSpec> specs;
};

std::string type_list(const std::vector<GgmlType>& types) {
  std::vector<std::string> names;
  for (GgmlType t : types) names.push_back(ggml_type_name(t));
  if (names.size() == 1) return names[0];
  return "one of " + fmt::format("{}", fmt::join(names, ", "));
}

std::string shape_string(const std::vector<uint64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

bool contains(const std::vector<GgmlType>& types, uint32_t id) {
  return std::any_of(types.begin(), types.end(), [&](GgmlType t) { return static_cast<uint32_t>(t) == id; });
}

}  // namespace

std::vector<TensorSpec> expected_tensors(const Config& c) {
  using K = TensorKind;
  const uint64_t embd = c.n_embd;
  const uint64_t hc = c.hc_dim();
  const uint64_t mix = c.hc_mix();
  Builder b;
  b.add("token_embd.weight", K::TokenEmbedding, {embd, c.n_vocab}, -1);
  for (uint32_t u = 0; u < c.n_layer; ++u) {
    const int il = static_cast<int>(u);
    const uint32_t ratio = c.compress_ratio(u);
    b.layer(il, "hc_attn_fn.weight", K::HcFn, {hc, mix});
    b.layer(il, "hc_attn_scale.weight", K::Vector, {3});
    b.layer(il, "hc_attn_base.weight", K::Vector, {mix});
    b.layer(il, "attn_norm.weight", K::Vector, {embd});
    b.layer(il, "attn_q_a.weight", K::AttentionProj, {embd, c.q_lora_rank});
    b.layer(il, "attn_q_a_norm.weight", K::Vector, {c.q_lora_rank});
    b.layer(il, "attn_q_b.weight", K::AttentionProj, {c.q_lora_rank, c.q_dim()});
    b.layer(il, "attn_kv.weight", K::AttentionProj, {embd, c.head_dim});
    b.layer(il, "attn_kv_a_norm.weight", K::Vector, {c.head_dim});
    b.layer(il, "attn_sinks.weight", K::Vector, {c.n_head});
    b.layer(il, "attn_output_a.weight", K::AttentionProj, {c.group_in_dim(), c.out_low_dim()});
    b.layer(il, "attn_output_b.weight", K::AttentionProj, {c.out_low_dim(), embd});
    if (ratio != 0) {
      const uint64_t w = c.compressor_width(u);
      b.layer(il, "attn_compressor_ape.weight", K::Compressor, {w, ratio});
      b.layer(il, "attn_compressor_kv.weight", K::Compressor, {embd, w});
      b.layer(il, "attn_compressor_gate.weight", K::Compressor, {embd, w});
      b.layer(il, "attn_compressor_norm.weight", K::Vector, {c.head_dim});
    }
    if (ratio == 4) {
      const uint64_t w = c.indexer_compressor_width();
      b.layer(il, "indexer.attn_q_b.weight", K::Indexer, {c.q_lora_rank, c.indexer_q_dim()});
      b.layer(il, "indexer.proj.weight", K::Indexer, {embd, c.n_indexer_head});
      b.layer(il, "indexer_compressor_ape.weight", K::Indexer, {w, ratio});
      b.layer(il, "indexer_compressor_kv.weight", K::Indexer, {embd, w});
      b.layer(il, "indexer_compressor_gate.weight", K::Indexer, {embd, w});
      b.layer(il, "indexer_compressor_norm.weight", K::Vector, {c.indexer_head_dim});
    }
    b.layer(il, "hc_ffn_fn.weight", K::HcFn, {hc, mix});
    b.layer(il, "hc_ffn_scale.weight", K::Vector, {3});
    b.layer(il, "hc_ffn_base.weight", K::Vector, {mix});
    b.layer(il, "ffn_norm.weight", K::Vector, {embd});
    b.layer(il, "ffn_gate_inp.weight", K::Router, {embd, c.n_expert});
    b.layer(il, "exp_probs_b.bias", K::Vector, {c.n_expert}, /*optional=*/true);
    b.layer(il, "ffn_gate_exps.weight", K::RoutedGateUp, {embd, c.n_ff_exp, c.n_expert});
    b.layer(il, "ffn_up_exps.weight", K::RoutedGateUp, {embd, c.n_ff_exp, c.n_expert});
    b.layer(il, "ffn_down_exps.weight", K::RoutedDown, {c.n_ff_exp, embd, c.n_expert});
    b.layer(il, "ffn_gate_shexp.weight", K::SharedExpert, {embd, c.n_ff_exp});
    b.layer(il, "ffn_up_shexp.weight", K::SharedExpert, {embd, c.n_ff_exp});
    b.layer(il, "ffn_down_shexp.weight", K::SharedExpert, {c.n_ff_exp, embd});
    if (c.is_hash_layer(u)) b.layer(il, "ffn_gate_tid2eid.weight", K::HashTable, {c.n_expert_used, c.n_vocab});
  }
  b.add("output_hc_fn.weight", K::HcFn, {hc, c.n_hc}, -1);
  b.add("output_hc_scale.weight", K::Vector, {1}, -1);
  b.add("output_hc_base.weight", K::Vector, {c.n_hc}, -1);
  b.add("output_norm.weight", K::Vector, {embd}, -1);
  b.add("output.weight", K::OutputHead, {embd, c.n_vocab}, -1);
  return std::move(b.specs);
}

std::string_view recipe_name(Recipe r) {
  switch (r) {
    case Recipe::q2: return "q2";
    case Recipe::q4: return "q4";
    case Recipe::f32: return "f32";
  }
  return "?";
}

std::optional<Recipe> parse_recipe(std::string_view name) {
  for (Recipe r : {Recipe::q2, Recipe::q4, Recipe::f32}) {
    if (recipe_name(r) == name) return r;
  }
  return std::nullopt;
}

GgmlType recipe_type(const TensorSpec& spec, Recipe recipe) {
  switch (spec.kind) {
    case TensorKind::Vector: return T::F32;
    case TensorKind::HashTable: return T::I32;
    default: break;
  }
  if (recipe == Recipe::f32) return T::F32;
  switch (spec.kind) {
    case TensorKind::RoutedGateUp: return recipe == Recipe::q2 ? T::IQ2_XXS : T::Q4_K;
    case TensorKind::RoutedDown: return recipe == Recipe::q2 ? T::Q2_K : T::Q4_K;
    case TensorKind::OutputHead:
    case TensorKind::AttentionProj:
    case TensorKind::SharedExpert:
      return T::Q8_0;
    default:
      return T::F16;  // embedding, HC, compressor, indexer, router
  }
}

void validate_layout(const Config& config, const gguf::Reader& reader) {
  const std::vector<TensorSpec> specs = expected_tensors(config);
  const Variant variant = config.variant();
  const bool strict = variant != Variant::Custom;
  std::vector<std::string> problems;
  std::unordered_set<std::string_view> expected_names;
  std::unordered_map<int, uint32_t> gate_type;  // layer -> routed gate type id

  for (const TensorSpec& spec : specs) {
    expected_names.insert(spec.name);
    const gguf::TensorInfo* t = reader.find_tensor(spec.name);
    if (t == nullptr) {
      if (!spec.optional) {
        problems.push_back(fmt::format("missing tensor '{}' ({} {})", spec.name, type_list(spec.exact),
                                       shape_string(spec.shape)));
      }
      continue;
    }
    const std::vector<uint64_t> shape(t->shape().begin(), t->shape().end());
    if (shape != spec.shape) {
      problems.push_back(fmt::format("tensor '{}' has shape {}, expected {}", spec.name, shape_string(shape),
                                     shape_string(spec.shape)));
    }
    if (!t->type_known) {
      problems.push_back(fmt::format("tensor '{}' has unknown ggml type {}; expected {}", spec.name, t->type_id,
                                     type_list(spec.accepted)));
      continue;
    }
    if (!contains(spec.accepted, t->type_id)) {
      problems.push_back(fmt::format("tensor '{}' has type {}; expected {}", spec.name, ggml_type_name(t->type_id),
                                     type_list(spec.accepted)));
      continue;
    }
    if (strict && !contains(spec.exact, t->type_id)) {
      problems.push_back(fmt::format("tensor '{}' has type {}; {} requires {}", spec.name, ggml_type_name(t->type_id),
                                     variant_name(variant), type_list(spec.exact)));
    }
    const auto info = ggml_type_info(t->type_id);
    if (t->dims[0] % info->block_elems != 0) {
      problems.push_back(fmt::format("tensor '{}' row length {} is not a multiple of the {} block size {}", spec.name,
                                     t->dims[0], info->name, info->block_elems));
    }
    if (spec.kind == TensorKind::RoutedGateUp) {
      const auto [it, first] = gate_type.emplace(spec.layer, t->type_id);
      if (!first && it->second != t->type_id) {
        problems.push_back(fmt::format("layer {}: routed gate and up experts must share a type, got {} and {}",
                                       spec.layer, ggml_type_name(it->second), ggml_type_name(t->type_id)));
      }
    }
  }
  for (const gguf::TensorInfo& t : reader.tensors()) {
    if (!expected_names.count(t.name)) {
      problems.push_back(fmt::format("unexpected tensor '{}' ({} {}) is not part of the layout", t.name,
                                     ggml_type_name(t.type_id), t.shape_string()));
    }
  }
  if (problems.empty()) return;

  constexpr size_t kMaxLines = 50;
  const size_t total = problems.size();
  if (total > kMaxLines) {
    problems.resize(kMaxLines);
    problems.push_back(fmt::format("... and {} more", total - kMaxLines));
  }
  fail("{}: tensor layout does not match the {} model ({} problem{}):\n  - {}", reader.name(), variant_name(variant),
       total, total == 1 ? "" : "s", fmt::join(problems, "\n  - "));
}

}  // namespace ds4::model
