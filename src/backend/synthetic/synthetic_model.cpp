#include "backend/synthetic/synthetic_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/f16.h"
#include "model/kv_state.h"
#include "quant/iq2xxs_tables.h"
#include "quant/quant.h"

namespace ds4::synth {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Root mean square of the integers lo..hi (a uniformly drawn sub-block scale).
double rms_range(int lo, int hi) {
  double s = 0;
  for (int k = lo; k <= hi; ++k) s += static_cast<double>(k) * k;
  return std::sqrt(s / (hi - lo + 1));
}

// f16 bits of v; fails when v does not round to a finite, normal f16 (the generator would
// otherwise write inf/zero scales).
uint16_t f16_scale(float v, GgmlType type) {
  const uint16_t h = f32_to_f16(v);
  const float back = f16_to_f32(h);
  if (!std::isfinite(back) || back < 6.103515625e-05f)
    fail("synthetic {}: block scale {:g} is not a normal f16 value", ggml_type_name(static_cast<uint32_t>(type)), v);
  return h;
}

/// Elements stored as f32 on the device although their GGUF type may be F16 (vectors, APE).
bool stored_as_f32(const model::TensorSpec& s) {
  return s.kind == model::TensorKind::Vector || s.kind == model::TensorKind::HashTable ||
         s.name.find("_ape.") != std::string::npos;
}

}  // namespace

std::vector<std::string_view> synthetic_names() { return {"flash-q2", "flash-q4", "pro-q2"}; }

SyntheticSpec parse_synthetic(std::string_view name) {
  SyntheticSpec s;
  s.name = std::string(name);
  if (name == "flash-q2") {
    s.config = model::Config::flash();
    s.recipe = model::Recipe::q2;
  } else if (name == "flash-q4") {
    s.config = model::Config::flash();
    s.recipe = model::Recipe::q4;
  } else if (name == "pro-q2") {
    s.config = model::Config::pro();
    s.recipe = model::Recipe::q2;
  } else {
    fail("unknown synthetic model '{}' (expected flash-q2, flash-q4 or pro-q2)", name);
  }
  return s;
}

SyntheticSpec with_layers(SyntheticSpec spec, uint32_t n_layer) {
  model::Config& c = spec.config;
  if (n_layer < 1 || n_layer > c.n_layer)
    fail("synthetic {}: {} layers requested, the model has 1..{}", spec.name, n_layer, c.n_layer);
  if (n_layer == c.n_layer) return spec;
  spec.name += fmt::format(" (first {} of {} layers)", n_layer, c.n_layer);
  c.n_layer = n_layer;
  c.n_hash_layer = std::min(c.n_hash_layer, n_layer);
  c.compress_ratios.resize(n_layer);
  c.swiglu_clamp.resize(n_layer);
  c.validate(spec.name);
  return spec;
}

uint64_t tensor_seed(uint64_t model_seed, std::string_view tensor_name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : tensor_name) h = (h ^ ch) * 1099511628211ull;
  return mix64(model_seed * 0x100000001b3ull ^ h);
}

float matrix_stdev(const model::TensorSpec& spec) {
  if (spec.kind == model::TensorKind::TokenEmbedding) return 1.0f;
  if (spec.name.find("_ape.") != std::string::npos) return 0.3f;
  return 1.0f / std::sqrt(static_cast<float>(spec.shape.at(0)));
}

SynthParams synth_params(GgmlType type, float stdev, uint64_t seed) {
  if (!(stdev > 0.0f) || !std::isfinite(stdev)) fail("synthetic weights: bad stdev {}", stdev);
  SynthParams p;
  p.type = static_cast<uint32_t>(type);
  p.seed = seed;
  const auto info = ggml_type_info(p.type);
  if (info) p.block_bytes = info->block_bytes;
  const double sd = stdev;
  switch (type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16:
      p.amp = static_cast<float>(sd * std::sqrt(3.0));  // U(-a, a) has stdev a / sqrt(3)
      break;
    case GgmlType::Q8_0: {
      // codes uniform on [-127, 127]: stdev sqrt((255^2 - 1) / 12)
      p.d = f16_scale(static_cast<float>(sd / std::sqrt((255.0 * 255.0 - 1.0) / 12.0)), type);
      break;
    }
    case GgmlType::Q2_K: {
      // value = d*sc*(q - 1.5), q uniform on 0..3 (stdev sqrt(1.25)), sc uniform on 8..15
      const double d = sd / (std::sqrt(1.25) * rms_range(kQ2ScaleLo, kQ2ScaleHi));
      p.d = f16_scale(static_cast<float>(d), type);
      p.dmin = f16_scale(1.5f * f16_to_f32(p.d), type);
      break;
    }
    case GgmlType::Q4_K: {
      // value = d*sc*(q - 7.5), q uniform on 0..15 (stdev sqrt(21.25)), sc uniform on 32..63
      const double d = sd / (std::sqrt(21.25) * rms_range(kQ4ScaleLo, kQ4ScaleHi));
      p.d = f16_scale(static_cast<float>(d), type);
      p.dmin = f16_scale(7.5f * f16_to_f32(p.d), type);
      break;
    }
    case GgmlType::IQ2_XXS: {
      // value = d * (2 ls + 1) / 8 * grid byte * sign; ls uniform on kIqLsLo..15, grid
      // points uniform over the 256 entries.
      double g2 = 0;
      for (uint64_t g : quant::kIq2xxs.grid)
        for (int j = 0; j < 8; ++j) {
          const double v = static_cast<double>((g >> (8 * j)) & 0xff);
          g2 += v * v;
        }
      g2 /= 256.0 * 8.0;
      double l2 = 0;
      for (int ls = kIqLsLo; ls <= 15; ++ls) l2 += (2.0 * ls + 1) * (2.0 * ls + 1) / 64.0;
      l2 /= (16 - kIqLsLo);
      p.d = f16_scale(static_cast<float>(sd / std::sqrt(g2 * l2)), type);
      break;
    }
    default:
      fail("synthetic weights: type {} is not generated (F32, F16, BF16, Q8_0, Q2_K, Q4_K, IQ2_XXS)",
           ggml_type_name(p.type));
  }
  return p;
}

void fill_vector(const model::TensorSpec& spec, const model::Config& c, uint64_t model_seed,
                 std::vector<float>& out) {
  const uint64_t seed = tensor_seed(model_seed, spec.name);
  const std::string_view name = spec.name;
  auto u = [&](size_t i) { return sym24(block_word(seed, i, 0)); };
  const size_t n = out.size();
  if (spec.kind != model::TensorKind::Vector) {  // APE rows and other small matrices
    const float a = matrix_stdev(spec) * std::sqrt(3.0f);
    for (size_t i = 0; i < n; ++i) out[i] = round_f16(a * u(i));
  } else if (ends_with(name, "norm.weight")) {
    for (size_t i = 0; i < n; ++i) out[i] = 1.0f + 0.1f * u(i);
  } else if (ends_with(name, "_scale.weight")) {
    for (size_t i = 0; i < n; ++i) out[i] = 0.5f + 0.1f * u(i);
  } else if (ends_with(name, "_base.weight") && name.rfind("output_hc", 0) != 0) {
    // pre/post near 0, combine favouring the identity (make-model's rule)
    const size_t nh = c.n_hc;
    for (size_t i = 0; i < n; ++i) {
      out[i] = 0.2f * u(i);
      if (i >= 2 * nh && (i - 2 * nh) / nh == (i - 2 * nh) % nh) out[i] += 2.0f;
    }
  } else if (ends_with(name, "attn_sinks.weight")) {
    for (size_t i = 0; i < n; ++i) out[i] = u(i);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = 0.05f * u(i);
  }
}

std::vector<int32_t> hash_table(const model::Config& c, uint64_t seed) {
  const uint32_t k = c.n_expert_used;
  std::vector<int32_t> ids(size_t{c.n_vocab} * k);
  std::vector<int32_t> perm(c.n_expert);
  for (uint64_t r = 0; r < c.n_vocab; ++r) {
    for (uint32_t e = 0; e < c.n_expert; ++e) perm[e] = static_cast<int32_t>(e);
    for (uint32_t j = 0; j < k; ++j) {  // partial Fisher-Yates: k distinct experts
      const uint64_t pick = j + block_word(seed, r, j) % (c.n_expert - j);
      std::swap(perm[j], perm[pick]);
      ids[r * k + j] = perm[j];
    }
  }
  return ids;
}

std::string MemoryPlan::describe() const {
  constexpr double G = 1024.0 * 1024.0 * 1024.0;
  return fmt::format("weights {:.2f} GiB + KV/compressor/indexer {:.2f} GiB (ctx {}) + scratch {:.2f} GiB = {:.2f} GiB",
                     weights / G, kv / G, ctx, scratch / G, total() / G);
}

uint64_t session_scratch_bytes(const model::Config& c, int64_t ctx, uint64_t max_act_row_bytes) {
  if (ctx < 1) fail("context size {} must be at least 1 token", ctx);
  uint64_t max_comp = 0;  // most compressed rows of any layer
  for (uint32_t il = 0; il < c.n_layer; ++il)
    if (const uint32_t r = c.compress_ratio(il)) max_comp = std::max<uint64_t>(max_comp, ctx / r + 2);
  const uint64_t hc = c.hc_dim(), D = c.n_embd, nh = c.n_hc, U = c.n_expert_used, FF = c.n_ff_exp;
  const uint64_t HD = c.head_dim, ID = c.indexer_head_dim;
  const uint64_t floats = 3 * hc + c.hc_mix() + 2 * nh + nh * nh  // x, x_next, flat, mix, pre, post, comb
                          + 3 * D                                  // sub_in, h, y
                          + c.q_lora_rank + 2 * c.q_dim()          // qr, q, attn
                          + HD + 4 * HD                            // kv_row, ck, cs
                          + std::max<uint64_t>(c.indexer_q_dim(), 1) + std::max<uint32_t>(c.n_indexer_head, 1)
                          + c.out_low_dim() + 2 * uint64_t{c.n_expert} + U  // low, router logits, probs, weights
                          + 3 * U * FF + U * D + D + nh + D + c.n_vocab     // gate, up, mid, down, shared, head, z, logits
                          + std::max(HD, ID)                                // pooled row
                          + std::max<uint64_t>(max_comp, 1)                 // indexer scores
                          + uint64_t{c.n_head} * (c.n_swa + max_comp + 1)   // attention weights
                          + 2 * static_cast<uint64_t>(ctx) * c.n_rot;       // RoPE cos/sin tables, 2 kinds
  const uint64_t ints = 2 * U + std::max<uint64_t>(max_comp, 1) + c.indexer_top_k  // sel, order, top-k
                        + static_cast<uint64_t>(ctx);                               // token ids
  const uint64_t act = max_act_row_bytes * std::max<uint64_t>({U, c.n_out_group, 1});
  const uint64_t positions = 8 * (static_cast<uint64_t>(ctx) + 1);  // position table + the step's
  return 4 * floats + 4 * ints + act + positions;
}

uint64_t device_tensor_bytes(const model::TensorSpec& s, GgmlType type) {
  uint64_t rows = 1;
  for (size_t i = 1; i < s.shape.size(); ++i) rows *= s.shape[i];
  if (stored_as_f32(s)) return 4 * s.shape[0] * rows;
  if (!quant::is_weight_type(type))
    fail("tensor {}: type {} is not a weight type", s.name, ggml_type_name(static_cast<uint32_t>(type)));
  return quant::row_bytes(type, static_cast<int64_t>(s.shape[0])) * rows;
}

MemoryPlan plan_memory(const model::Config& c,
                       const std::function<GgmlType(const model::TensorSpec&)>& type_of, int64_t ctx) {
  if (ctx < 1) fail("context size {} must be at least 1 token", ctx);
  MemoryPlan p;
  p.ctx = ctx;
  uint64_t max_act = 0;
  for (const model::TensorSpec& s : model::expected_tensors(c)) {
    const GgmlType t = stored_as_f32(s) ? GgmlType::F32 : type_of(s);
    p.weights += device_tensor_bytes(s, t);
    if (!stored_as_f32(s) && s.kind != model::TensorKind::TokenEmbedding)
      max_act = std::max<uint64_t>(
          max_act, quant::act_row_bytes(quant::activation_type(t), static_cast<int64_t>(s.shape[0])));
  }
  p.kv = model::KvState::estimate(c, ctx).total();
  p.scratch = session_scratch_bytes(c, ctx, max_act);
  return p;
}

uint64_t decode_weight_bytes(const model::Config& c,
                             const std::function<GgmlType(const model::TensorSpec&)>& type_of) {
  uint64_t bytes = 0;
  for (const model::TensorSpec& s : model::expected_tensors(c)) {
    if (stored_as_f32(s) || s.kind == model::TensorKind::TokenEmbedding) continue;
    const uint64_t b = device_tensor_bytes(s, type_of(s));
    const bool routed = s.kind == model::TensorKind::RoutedGateUp || s.kind == model::TensorKind::RoutedDown;
    bytes += routed ? b / c.n_expert * c.n_expert_used : b;
  }
  return bytes;
}

void check_fits(const MemoryPlan& plan, uint64_t free_bytes, double cap_gib, std::string_view what,
                uint64_t headroom) {
  constexpr double G = 1024.0 * 1024.0 * 1024.0;
  uint64_t avail = free_bytes;
  std::string limit = fmt::format("{:.2f} GiB free on the GPU", free_bytes / G);
  if (cap_gib > 0) {
    const auto cap = static_cast<uint64_t>(cap_gib * G);
    if (cap < avail) {
      avail = cap;
      limit = fmt::format("the --gpu-vram cap is {:.2f} GiB ({:.2f} GiB free)", cap_gib, free_bytes / G);
    }
  }
  if (plan.total() + headroom > avail)
    fail("{} does not fit in GPU memory: it needs {} (+ {:.2f} GiB headroom) but {}; use a smaller "
         "context or a smaller model",
         what, plan.describe(), headroom / G, limit);
}

}  // namespace ds4::synth
