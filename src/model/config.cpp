#include "model/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "common/error.h"
#include "gguf/reader.h"
#include "gguf/writer.h"

namespace ds4::model {

namespace {

struct U32Field {
  const char* key;
  uint32_t Config::*field;
};

// Required u32 keys, in spec §1.3 order.
constexpr U32Field kU32Fields[] = {
    {keys::kBlockCount, &Config::n_layer},
    {keys::kEmbeddingLength, &Config::n_embd},
    {keys::kVocabSize, &Config::n_vocab},
    {keys::kHeadCount, &Config::n_head},
    {keys::kHeadCountKv, &Config::n_head_kv},
    {keys::kKeyLength, &Config::head_dim},
    {keys::kValueLength, &Config::value_dim},
    {keys::kRopeDimensionCount, &Config::n_rot},
    {keys::kQLoraRank, &Config::q_lora_rank},
    {keys::kOutputLoraRank, &Config::o_lora_rank},
    {keys::kOutputGroupCount, &Config::n_out_group},
    {keys::kExpertCount, &Config::n_expert},
    {keys::kExpertUsedCount, &Config::n_expert_used},
    {keys::kExpertFeedForwardLength, &Config::n_ff_exp},
    {keys::kExpertSharedCount, &Config::n_expert_shared},
    {keys::kHashLayerCount, &Config::n_hash_layer},
    {keys::kSlidingWindow, &Config::n_swa},
    {keys::kIndexerHeadCount, &Config::n_indexer_head},
    {keys::kIndexerKeyLength, &Config::indexer_head_dim},
    {keys::kIndexerTopK, &Config::indexer_top_k},
    {keys::kHcCount, &Config::n_hc},
    {keys::kHcSinkhornIterations, &Config::hc_sinkhorn_iter},
};

struct F32Field {
  const char* key;
  float Config::*field;
};

// Required float keys (all must be positive and finite).
constexpr F32Field kF32Fields[] = {
    {keys::kHcEpsilon, &Config::hc_eps},
    {keys::kRopeFreqBase, &Config::rope_freq_base},
    {keys::kRopeScalingFactor, &Config::rope_scale_factor},
    {keys::kRopeYarnBetaFast, &Config::rope_yarn_beta_fast},
    {keys::kRopeYarnBetaSlow, &Config::rope_yarn_beta_slow},
    {keys::kCompressRopeFreqBase, &Config::compress_rope_freq_base},
    {keys::kExpertWeightsScale, &Config::expert_weight_scale},
    {keys::kRmsEpsilon, &Config::rms_eps},
};

// u32 keys that must be positive (everything except head_count_kv, expert_shared_count and
// hash_layer_count, which have their own rules).
bool must_be_positive(std::string_view key) {
  return key != keys::kHeadCountKv && key != keys::kExpertSharedCount && key != keys::kHashLayerCount;
}

// Relative tolerance 1e-6 (spec §1.3). Deliberately stricter than ds4's config_expect_f32,
// whose tolerance is absolute below magnitude 1 and so cannot tell an epsilon of 1e-6 from 2e-6.
bool close_f32(float got, float expected) {
  return std::fabs(static_cast<double>(got) - expected) <= 1.0e-6 * std::fabs(static_cast<double>(expected));
}

// Ratio schedule of the real models (spec §1.2; Pro: layers 0 and 1 use 128).
std::vector<uint32_t> alternating_ratios(uint32_t n_layer, uint32_t first_two) {
  std::vector<uint32_t> r(n_layer);
  for (uint32_t il = 0; il < n_layer; ++il) r[il] = il < 2 ? first_two : (il % 2 == 0 ? 4u : 128u);
  return r;
}

// Appends the exact-value checks of a real model to `p`.
void check_known_shape(const Config& c, const Config& ref, std::vector<std::string>& p) {
  const std::string_view name = variant_name(c.variant());
  for (const U32Field& f : kU32Fields) {
    if (c.*f.field != ref.*f.field) {
      p.push_back(fmt::format("{} is {}; {} requires {}", f.key, c.*f.field, name, ref.*f.field));
    }
  }
  for (const F32Field& f : kF32Fields) {
    if (!close_f32(c.*f.field, ref.*f.field)) {
      p.push_back(fmt::format("{} is {}; {} requires {}", f.key, c.*f.field, name, ref.*f.field));
    }
  }
  if (c.rope_orig_ctx != ref.rope_orig_ctx) {
    p.push_back(fmt::format("{} is {}; {} requires {}", keys::kRopeOrigCtx, c.rope_orig_ctx, name, ref.rope_orig_ctx));
  }
  if (c.expert_weights_norm != ref.expert_weights_norm) {
    p.push_back(fmt::format("{} is {}; {} requires {}", keys::kExpertWeightsNorm, c.expert_weights_norm, name,
                            ref.expert_weights_norm));
  }
  if (c.compress_ratios.size() == ref.compress_ratios.size()) {
    std::vector<std::string> bad;
    for (size_t il = 0; il < c.compress_ratios.size(); ++il) {
      if (c.compress_ratios[il] != ref.compress_ratios[il]) {
        bad.push_back(fmt::format("[{}] is {}, expected {}", il, c.compress_ratios[il], ref.compress_ratios[il]));
      }
    }
    if (!bad.empty()) {
      p.push_back(fmt::format("{} differs from {}'s schedule: {}", keys::kCompressRatios, name, fmt::join(bad, ", ")));
    }
  }
  if (c.swiglu_clamp.size() == ref.swiglu_clamp.size()) {
    for (size_t il = 0; il < c.swiglu_clamp.size(); ++il) {
      if (!close_f32(c.swiglu_clamp[il], ref.swiglu_clamp[il])) {
        p.push_back(fmt::format("{}[{}] is {}; {} requires {}", keys::kSwigluClampExp, il, c.swiglu_clamp[il], name,
                                ref.swiglu_clamp[il]));
      }
    }
  }
}

std::string bullet_list(const std::vector<std::string>& items) {
  return fmt::format("  - {}", fmt::join(items, "\n  - "));
}

}  // namespace

std::string_view variant_name(Variant v) {
  switch (v) {
    case Variant::Flash: return "DeepSeek V4 Flash";
    case Variant::Pro: return "DeepSeek V4 Pro";
    case Variant::Custom: return "custom";
  }
  return "custom";
}

uint32_t Config::compress_ratio(uint32_t il) const {
  if (il >= compress_ratios.size()) fail("layer {} is out of range: the model has {} layers", il, compress_ratios.size());
  return compress_ratios[il];
}

uint64_t Config::compressor_width(uint32_t il) const {
  const uint32_t r = compress_ratio(il);
  if (r == 0) return 0;
  return (r == 4 ? 2ull : 1ull) * head_dim;
}

float Config::swiglu_clamp_of(uint32_t il) const {
  if (il >= swiglu_clamp.size()) fail("layer {} is out of range: the model has {} layers", il, swiglu_clamp.size());
  return swiglu_clamp[il];
}

Variant Config::variant() const {
  if (n_layer == 43 && n_embd == 4096) return Variant::Flash;
  if (n_layer == 61 && n_embd == 7168) return Variant::Pro;
  return Variant::Custom;
}

std::vector<std::string> Config::problems() const {
  std::vector<std::string> p;
  for (const U32Field& f : kU32Fields) {
    if (must_be_positive(f.key) && this->*f.field == 0) p.push_back(fmt::format("{} is 0; it must be positive", f.key));
  }
  if (n_head_kv != 1) {
    p.push_back(fmt::format("{} is {}; the model has exactly 1 KV head (one shared K = V row)", keys::kHeadCountKv, n_head_kv));
  }
  if (head_dim != value_dim) {
    p.push_back(fmt::format("{} ({}) differs from {} ({}); K and V are the same row", keys::kKeyLength, head_dim,
                            keys::kValueLength, value_dim));
  }
  if (n_rot % 2 != 0) p.push_back(fmt::format("{} {} is odd; RoPE rotates pairs", keys::kRopeDimensionCount, n_rot));
  if (n_rot > head_dim) {
    p.push_back(fmt::format("{} {} exceeds {} {}", keys::kRopeDimensionCount, n_rot, keys::kKeyLength, head_dim));
  }
  if (n_rot > indexer_head_dim) {
    p.push_back(fmt::format("{} {} exceeds {} {} (indexer heads rotate their tail too)", keys::kRopeDimensionCount,
                            n_rot, keys::kIndexerKeyLength, indexer_head_dim));
  }
  if (indexer_head_dim != 0 && (indexer_head_dim & (indexer_head_dim - 1)) != 0) {
    p.push_back(fmt::format("{} {} is not a power of two (the indexer applies a Hadamard transform)",
                            keys::kIndexerKeyLength, indexer_head_dim));
  }
  if (n_out_group != 0 && n_head % n_out_group != 0) {
    p.push_back(fmt::format("{} {} is not a multiple of {} {}", keys::kHeadCount, n_head, keys::kOutputGroupCount, n_out_group));
  }
  if (n_expert_used > n_expert) {
    p.push_back(fmt::format("{} {} exceeds {} {}", keys::kExpertUsedCount, n_expert_used, keys::kExpertCount, n_expert));
  }
  if (n_expert_shared != 1) {
    p.push_back(fmt::format("{} is {}; the model has exactly 1 shared expert", keys::kExpertSharedCount, n_expert_shared));
  }
  if (n_hash_layer > n_layer) {
    p.push_back(fmt::format("{} {} exceeds {} {}", keys::kHashLayerCount, n_hash_layer, keys::kBlockCount, n_layer));
  }
  if (n_expert_group.value_or(0) != 0) {
    p.push_back(fmt::format("{} is {}; group-limited routing is not supported (must be 0 or absent)",
                            keys::kExpertGroupCount, *n_expert_group));
  }
  if (n_expert_group_used.value_or(0) != 0) {
    p.push_back(fmt::format("{} is {}; group-limited routing is not supported (must be 0 or absent)",
                            keys::kExpertGroupUsedCount, *n_expert_group_used));
  }
  if (compress_ratios.size() != n_layer) {
    p.push_back(fmt::format("{} has {} entries, expected {} ({})", keys::kCompressRatios, compress_ratios.size(),
                            n_layer, keys::kBlockCount));
  }
  for (size_t il = 0; il < compress_ratios.size(); ++il) {
    const uint32_t r = compress_ratios[il];
    if (r != 0 && r != 4 && r != 128) {
      p.push_back(fmt::format("{}[{}] is {}; expected 0, 4 or 128", keys::kCompressRatios, il, r));
    }
  }
  if (swiglu_clamp.size() != n_layer) {
    p.push_back(fmt::format("{} has {} entries, expected {} ({})", keys::kSwigluClampExp, swiglu_clamp.size(), n_layer,
                            keys::kBlockCount));
  }
  for (size_t il = 0; il < swiglu_clamp.size(); ++il) {
    if (!std::isfinite(swiglu_clamp[il]) || swiglu_clamp[il] <= 0) {
      p.push_back(fmt::format("{}[{}] is {}; it must be a positive finite number", keys::kSwigluClampExp, il,
                              swiglu_clamp[il]));
    }
  }
  for (const F32Field& f : kF32Fields) {
    const float v = this->*f.field;
    if (!std::isfinite(v) || v <= 0) p.push_back(fmt::format("{} is {}; it must be a positive finite number", f.key, v));
  }
  if (rope_yarn_beta_fast <= rope_yarn_beta_slow) {
    p.push_back(fmt::format("{} ({}) must exceed {} ({})", keys::kRopeYarnBetaFast, rope_yarn_beta_fast,
                            keys::kRopeYarnBetaSlow, rope_yarn_beta_slow));
  }
  if (rope_orig_ctx == 0) p.push_back(fmt::format("{} is 0; it must be positive", keys::kRopeOrigCtx));

  switch (variant()) {
    case Variant::Flash: check_known_shape(*this, flash(), p); break;
    case Variant::Pro: check_known_shape(*this, pro(), p); break;
    case Variant::Custom: break;
  }
  return p;
}

void Config::validate(std::string_view source) const {
  const std::vector<std::string> p = problems();
  if (!p.empty()) {
    fail("{}: invalid DeepSeek V4 configuration ({} problem{}):\n{}", source, p.size(), p.size() == 1 ? "" : "s",
         bullet_list(p));
  }
}

Config Config::from_gguf(const gguf::Reader& r) {
  Config c;
  std::vector<std::string> errors;
  const std::string prefix = r.name() + ": ";
  auto attempt = [&](auto&& read) {
    try {
      read();
    } catch (const ds4::Error& e) {
      std::string msg = e.what();
      if (msg.rfind(prefix, 0) == 0) msg.erase(0, prefix.size());
      errors.push_back(std::move(msg));
    }
  };

  for (const U32Field& f : kU32Fields) attempt([&] { c.*f.field = r.get_u32(f.key); });
  for (const F32Field& f : kF32Fields) attempt([&] { c.*f.field = r.get_f32(f.key); });
  attempt([&] { c.rope_orig_ctx = r.get_u64(keys::kRopeOrigCtx); });
  attempt([&] { c.expert_weights_norm = r.get_bool(keys::kExpertWeightsNorm); });
  if (const auto* v = r.find(keys::kExpertGroupCount)) attempt([&] { c.n_expert_group = v->as_u32(); });
  if (const auto* v = r.find(keys::kExpertGroupUsedCount)) attempt([&] { c.n_expert_group_used = v->as_u32(); });
  if (const auto* v = r.find(keys::kContextLength)) attempt([&] { c.context_length = v->as_u64(); });

  const bool have_layers = r.has(keys::kBlockCount) && r.at(keys::kBlockCount).type() == gguf::ValueType::U32;
  attempt([&] {
    const gguf::ValueRef* v = r.find(keys::kCompressRatios);
    if (!v) fail("{}metadata key '{}' is missing (expected array of i32 or u32)", prefix, keys::kCompressRatios);
    if (v->type() != gguf::ValueType::ARRAY ||
        (v->item_type() != gguf::ValueType::I32 && v->item_type() != gguf::ValueType::U32)) {
      fail("{}metadata key '{}' has type {}, expected array of i32 or u32", prefix, keys::kCompressRatios, v->type_name());
    }
    const std::vector<int64_t> ratios = v->as_int_array();
    if (have_layers && ratios.size() < c.n_layer) {
      fail("{}metadata key '{}' has {} entries, fewer than {} {}", prefix, keys::kCompressRatios, ratios.size(),
           keys::kBlockCount, c.n_layer);
    }
    const size_t n = have_layers ? c.n_layer : ratios.size();
    for (size_t il = 0; il < n; ++il) {
      if (ratios[il] < 0) fail("{}metadata key '{}'[{}] is negative ({})", prefix, keys::kCompressRatios, il, ratios[il]);
      c.compress_ratios.push_back(static_cast<uint32_t>(ratios[il]));
    }
  });
  attempt([&] {
    const gguf::ValueRef* v = r.find(keys::kSwigluClampExp);
    if (!v) fail("{}metadata key '{}' is missing (expected array of f32 or f64)", prefix, keys::kSwigluClampExp);
    std::vector<float> clamp = v->as_f32_array();
    if (have_layers && clamp.size() < c.n_layer) {
      fail("{}metadata key '{}' has {} entries, fewer than {} {}", prefix, keys::kSwigluClampExp, clamp.size(),
           keys::kBlockCount, c.n_layer);
    }
    if (have_layers) clamp.resize(c.n_layer);
    c.swiglu_clamp = std::move(clamp);
  });

  if (!errors.empty()) {
    fail("{}: invalid DeepSeek V4 configuration ({} problem{}):\n{}", r.name(), errors.size(),
         errors.size() == 1 ? "" : "s", bullet_list(errors));
  }
  c.validate(r.name());
  return c;
}

void Config::write_metadata(gguf::Writer& w) const {
  using gguf::Value;
  for (const U32Field& f : kU32Fields) w.set(f.key, Value::u32(this->*f.field));
  if (n_expert_group) w.set(keys::kExpertGroupCount, Value::u32(*n_expert_group));
  if (n_expert_group_used) w.set(keys::kExpertGroupUsedCount, Value::u32(*n_expert_group_used));
  for (const F32Field& f : kF32Fields) w.set(f.key, Value::f32(this->*f.field));
  std::vector<int32_t> ratios(compress_ratios.begin(), compress_ratios.end());
  w.set(keys::kCompressRatios, Value::i32_array(ratios));
  w.set(keys::kSwigluClampExp, Value::f32_array(swiglu_clamp));
  w.set(keys::kRopeOrigCtx, Value::u64(rope_orig_ctx));
  w.set(keys::kExpertWeightsNorm, Value::boolean(expert_weights_norm));
  if (context_length) w.set(keys::kContextLength, Value::u64(*context_length));
}

Config Config::flash() {
  Config c;
  c.n_layer = 43;
  c.n_embd = 4096;
  c.n_vocab = 129280;
  c.n_head = 64;
  c.n_head_kv = 1;
  c.head_dim = 512;
  c.value_dim = 512;
  c.n_rot = 64;
  c.q_lora_rank = 1024;
  c.o_lora_rank = 1024;
  c.n_out_group = 8;
  c.n_expert = 256;
  c.n_expert_used = 6;
  c.n_ff_exp = 2048;
  c.n_expert_shared = 1;
  c.n_hash_layer = 3;
  c.n_swa = 128;
  c.n_indexer_head = 64;
  c.indexer_head_dim = 128;
  c.indexer_top_k = 512;
  c.n_hc = 4;
  c.hc_sinkhorn_iter = 20;
  c.hc_eps = 1e-6f;
  c.compress_ratios = alternating_ratios(43, 0);
  c.swiglu_clamp.assign(43, 10.0f);
  c.rope_orig_ctx = 65536;
  c.rope_freq_base = 10000.0f;
  c.rope_scale_factor = 16.0f;
  c.rope_yarn_beta_fast = 32.0f;
  c.rope_yarn_beta_slow = 1.0f;
  c.compress_rope_freq_base = 160000.0f;
  c.expert_weight_scale = 1.5f;
  c.rms_eps = 1e-6f;
  c.expert_weights_norm = true;
  c.context_length = 1048576;  // model card: 1M tokens; informational only
  return c;
}

Config Config::pro() {
  Config c = flash();
  c.n_layer = 61;
  c.n_embd = 7168;
  c.n_head = 128;
  c.q_lora_rank = 1536;
  c.n_out_group = 16;
  c.n_expert = 384;
  c.n_ff_exp = 3072;
  c.indexer_top_k = 1024;
  c.expert_weight_scale = 2.5f;
  c.compress_ratios = alternating_ratios(61, 128);
  c.swiglu_clamp.assign(61, 10.0f);
  return c;
}

Config Config::tiny(uint32_t n_vocab) {
  Config c = flash();
  c.n_layer = 7;
  c.n_embd = 256;
  c.n_vocab = n_vocab;
  c.n_head = 4;
  c.head_dim = 64;
  c.value_dim = 64;
  c.n_rot = 16;
  c.q_lora_rank = 64;
  c.o_lora_rank = 32;
  c.n_out_group = 2;
  c.n_expert = 16;
  c.n_expert_used = 3;
  c.n_ff_exp = 256;
  c.n_hash_layer = 3;
  c.n_swa = 16;
  c.n_indexer_head = 4;
  c.indexer_head_dim = 32;
  c.indexer_top_k = 8;
  c.compress_ratios = alternating_ratios(7, 0);
  c.swiglu_clamp.assign(7, 10.0f);
  return c;
}

Config Config::nano() {
  Config c = flash();
  c.n_layer = 6;
  c.n_embd = 256;
  c.n_head = 4;
  c.head_dim = 128;
  c.value_dim = 128;
  c.n_rot = 32;
  c.q_lora_rank = 128;
  c.o_lora_rank = 64;
  c.n_out_group = 2;
  c.n_expert = 4;
  c.n_expert_used = 2;
  c.n_ff_exp = 256;
  c.n_hash_layer = 2;
  c.n_indexer_head = 4;
  c.indexer_head_dim = 64;
  c.indexer_top_k = 32;
  c.compress_ratios = alternating_ratios(6, 0);
  c.swiglu_clamp.assign(6, 10.0f);
  return c;
}

}  // namespace ds4::model
