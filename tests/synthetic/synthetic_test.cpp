// ds4::synth: the memory plan against hand-computed byte counts, the fit check's messages, and
// the seeded block generator (valid, finite blocks whose dequantized values have the intended
// mean and standard deviation; deterministic per (seed, block)).
#include "backend/synthetic/synthetic_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <set>
#include <string>

#include "common/error.h"
#include "common/f16.h"
#include "model/kv_state.h"
#include "quant/quant.h"

namespace ds4::synth {
namespace {

using model::Config;
using model::Recipe;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SyntheticSpec, NamesResolveToTheRealShapesAndRecipes) {
  EXPECT_EQ(parse_synthetic("flash-q2").config, Config::flash());
  EXPECT_EQ(parse_synthetic("flash-q2").recipe, Recipe::q2);
  EXPECT_EQ(parse_synthetic("flash-q4").recipe, Recipe::q4);
  EXPECT_EQ(parse_synthetic("pro-q2").config, Config::pro());
  EXPECT_EQ(synthetic_names().size(), 3u);
  EXPECT_NE(error_of([] { parse_synthetic("flash"); })
                .find("unknown synthetic model 'flash' (expected flash-q2, flash-q4 or pro-q2)"),
            std::string::npos);
}

// --synthetic-layers: the first N layers with the full model's per-layer schedule, the plan
// smaller by exactly the dropped layers' tensors, and N outside 1..n_layer refused.
TEST(SyntheticSpec, WithLayersKeepsTheFirstLayersOfTheSchedule) {
  const SyntheticSpec full = parse_synthetic("flash-q2");
  const SyntheticSpec cut = with_layers(full, 5);
  EXPECT_EQ(cut.name, "flash-q2 (first 5 of 43 layers)");
  EXPECT_EQ(cut.config.n_layer, 5u);
  EXPECT_EQ(cut.config.n_hash_layer, 3u);
  EXPECT_EQ(cut.config.compress_ratios, std::vector<uint32_t>(full.config.compress_ratios.begin(),
                                                              full.config.compress_ratios.begin() + 5));
  EXPECT_EQ(cut.config.swiglu_clamp.size(), 5u);
  EXPECT_EQ(with_layers(full, 2).config.n_hash_layer, 2u);
  EXPECT_EQ(with_layers(full, 43).config, full.config);
  EXPECT_EQ(with_layers(full, 43).name, "flash-q2");
  // The plan's weights: the full model's less the tensors of layers 5..42 (every tensor whose
  // name starts "blk.N." for N >= 5), counted from expected_tensors independently.
  auto type_of = [](const model::TensorSpec& s) { return model::recipe_type(s, Recipe::q2); };
  uint64_t dropped = 0;
  for (const model::TensorSpec& t : model::expected_tensors(full.config)) {
    int il = -1;
    if (std::sscanf(t.name.c_str(), "blk.%d.", &il) == 1 && il >= 5) dropped += device_tensor_bytes(t, type_of(t));
  }
  EXPECT_GT(dropped, uint64_t{60} << 30);
  EXPECT_EQ(plan_memory(cut.config, type_of, 4096).weights + dropped,
            plan_memory(full.config, type_of, 4096).weights);
  EXPECT_NE(error_of([&] { with_layers(full, 0); }).find("0 layers requested, the model has 1..43"), std::string::npos);
  EXPECT_NE(error_of([&] { with_layers(full, 44); }).find("44 layers requested"), std::string::npos);
}

// Flash q2 weights by hand (spec §2.2 shapes, bytes per block: Q8_0 34/32, Q2_K 84/256,
// IQ2_XXS 66/256, F16 2, f32 vectors 4).
TEST(MemoryPlan, FlashQ2WeightsMatchAHandCount) {
  const Config c = Config::flash();
  const MemoryPlan p = plan_memory(c, [](const model::TensorSpec& s) { return model::recipe_type(s, Recipe::q2); }, 4096);
  const double q8 = 34.0 / 32, iq2 = 66.0 / 256, q2k = 84.0 / 256;
  const double D = 4096, V = 129280, HC = 4 * D, MIX = 24, FF = 2048, E = 256;
  double per_layer = 0;
  per_layer += 2 * (HC * MIX * 2 + 3 * 4 + MIX * 4);                                   // HC fn (F16), scale, base
  per_layer += D * 4 * 2;                                                              // attn_norm, ffn_norm
  per_layer += (D * 1024 + 1024 * 32768 + D * 512 + 4096 * 8192 + 8192 * D) * q8;      // attention
  per_layer += (1024 + 512 + 64) * 4;                                                  // q_a_norm, kv_a_norm, sinks
  per_layer += D * E * 2 + E * 4;                                                      // router F16 + bias
  per_layer += E * (2 * D * FF * iq2 + FF * D * q2k);                                  // routed experts
  per_layer += 3 * D * FF * q8;                                                        // shared expert
  double total = 43 * per_layer + D * V * 2 /*embedding F16*/ + D * V * q8 /*head*/ +
                 (HC * 4 * 2 + 4 + 4 * 4 + D * 4);                                    // output HC fn/scale/base, norm
  double comp = 0;  // compressor (F16 kv/gate, f32 ape + norm) and indexer per compressed layer
  for (uint32_t il = 0; il < c.n_layer; ++il) {
    const uint32_t r = c.compress_ratio(il);
    if (!r) continue;
    const double w = (r == 4 ? 2 : 1) * 512.0;
    comp += 2 * D * w * 2 + w * r * 4 + 512 * 4;
    if (r == 4) comp += 1024.0 * 64 * 128 * 2 + D * 64 * 2 + 256.0 * 4 * 4 + 2 * D * 256 * 2 + 128 * 4;
  }
  total += comp + 3 * V * 6 * 4;  // + hash tables of the 3 hash layers (i32)
  EXPECT_EQ(p.weights, static_cast<uint64_t>(total));
  EXPECT_EQ(p.kv, model::KvState::estimate(c, 4096).total());
  EXPECT_GT(p.scratch, 0u);
  EXPECT_EQ(p.total(), p.weights + p.kv + p.scratch);
  // q4 experts are larger (144/256 per value for all three routed tensors).
  const MemoryPlan p4 = plan_memory(c, [](const model::TensorSpec& s) { return model::recipe_type(s, Recipe::q4); }, 4096);
  EXPECT_EQ(p4.weights - p.weights,
            static_cast<uint64_t>(43 * E * (3 * D * FF * (144.0 / 256) - (2 * D * FF * iq2 + FF * D * q2k))));
}

TEST(MemoryPlan, DecodeReadsSixOfTheRoutedExpertsAndNoEmbedding) {
  const Config c = Config::flash();
  auto q2 = [](const model::TensorSpec& s) { return model::recipe_type(s, Recipe::q2); };
  const MemoryPlan p = plan_memory(c, q2, 1);
  const double D = 4096, V = 129280, FF = 2048, E = 256;
  const double routed_all = 43 * E * (2 * D * FF * 66.0 / 256 + FF * D * 84.0 / 256);
  uint64_t vec_bytes = 0;  // f32 vectors, APE tables and hash tables, not read as matrices
  for (const model::TensorSpec& s : model::expected_tensors(c)) {
    uint64_t n = 1;
    for (uint64_t d : s.shape) n *= d;
    if (s.kind == model::TensorKind::Vector || s.kind == model::TensorKind::HashTable ||
        s.name.find("_ape.") != std::string::npos)
      vec_bytes += 4 * n;
  }
  const uint64_t expect = p.weights - static_cast<uint64_t>(D * V * 2) - vec_bytes -
                          static_cast<uint64_t>(routed_all) + static_cast<uint64_t>(routed_all / E * 6);
  EXPECT_EQ(decode_weight_bytes(c, q2), expect);
  // about 9 GB (8.9 GiB) per token for Flash q2 (issue #6)
  EXPECT_GT(decode_weight_bytes(c, q2), 8.5e9);
  EXPECT_LT(decode_weight_bytes(c, q2), 10e9);
}

TEST(MemoryPlan, ScratchCountsTheSessionBuffers) {
  const Config c = Config::tiny(512);
  const int64_t ctx = 100;
  const uint64_t act = 1000;
  const uint64_t s0 = session_scratch_bytes(c, ctx, 0), s1 = session_scratch_bytes(c, ctx, act);
  EXPECT_EQ(s1 - s0, act * std::max<uint64_t>({c.n_expert_used, c.n_out_group, 1}));
  // one more token of context adds at most one compressed row to the score buffers
  const uint64_t s2 = session_scratch_bytes(c, ctx + 4, 0);
  // scores, attention weights per head, top-k id, 4 token ids, 4 positions of 2 RoPE tables, 4 positions
  EXPECT_EQ(s2 - s0, 4 * (1 + c.n_head + 1 + 4) + 4 * 4 * 2 * c.n_rot + 8 * 4);
  EXPECT_THROW(session_scratch_bytes(c, 0, 0), Error);
  EXPECT_THROW(plan_memory(c, [](const model::TensorSpec&) { return GgmlType::Q8_K; }, 16), Error);
}

TEST(MemoryPlan, FitCheckNamesThePlanFreeMemoryAndCap) {
  MemoryPlan p;
  p.weights = uint64_t{80} << 30;
  p.kv = uint64_t{1} << 30;
  p.scratch = uint64_t{1} << 20;
  p.ctx = 32768;
  EXPECT_NO_THROW(check_fits(p, uint64_t{139} << 30, 0, "flash-q2"));
  const std::string e = error_of([&] { check_fits(p, uint64_t{139} << 30, 64, "synthetic flash-q2"); });
  EXPECT_NE(e.find("synthetic flash-q2 does not fit in GPU memory"), std::string::npos) << e;
  EXPECT_NE(e.find("weights 80.00 GiB"), std::string::npos) << e;
  EXPECT_NE(e.find("the --gpu-vram cap is 64.00 GiB (139.00 GiB free)"), std::string::npos) << e;
  const std::string f = error_of([&] { check_fits(p, uint64_t{81} << 30, 0, "x"); });
  EXPECT_NE(f.find("81.00 GiB free on the GPU"), std::string::npos) << f;  // headroom 0.5 GiB
  EXPECT_NO_THROW(check_fits(p, (uint64_t{81} << 30) + (uint64_t{2} << 20) + (uint64_t{512} << 20), 0, "x"));
}

// Generates `rows` x `cols` of `type`, dequantizes with the reference decoder and returns the
// values; checks every f16 scale field is finite and normal.
std::vector<float> generate(GgmlType type, int64_t cols, int64_t rows, float stdev, uint64_t seed) {
  const SynthParams p = synth_params(type, stdev, seed);
  const auto info = *ggml_type_info(p.type);
  const size_t rb = quant::row_bytes(type, cols);
  const int64_t nb = cols / info.block_elems * rows;
  std::vector<uint8_t> bytes(rb * rows);
  for (int64_t b = 0; b < nb; ++b) synth_block(p, static_cast<uint64_t>(b), bytes.data() + b * info.block_bytes);
  std::vector<float> out(static_cast<size_t>(cols * rows));
  for (int64_t r = 0; r < rows; ++r) quant::dequantize_row(type, bytes.data() + r * rb, out.data() + r * cols, cols);
  return out;
}

TEST(SyntheticBlocks, DequantizedValuesHaveTheIntendedStatistics) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q2_K,
                     GgmlType::Q4_K, GgmlType::IQ2_XXS}) {
    SCOPED_TRACE(ggml_type_name(t));
    const int64_t cols = 1024, rows = 64;
    const float stdev = 1.0f / 32.0f;  // 1/sqrt(1024)
    const std::vector<float> v = generate(t, cols, rows, stdev, 7);
    double s = 0, s2 = 0;
    for (float x : v) {
      ASSERT_TRUE(std::isfinite(x));
      s += x;
      s2 += static_cast<double>(x) * x;
    }
    const double n = static_cast<double>(v.size());
    const double mean = s / n, sd = std::sqrt(s2 / n - mean * mean);
    EXPECT_NEAR(sd / stdev, 1.0, 0.05);
    EXPECT_LT(std::abs(mean), 0.02 * stdev);
  }
}

TEST(SyntheticBlocks, DeterministicPerSeedAndBlockAndDistinctAcrossBlocks) {
  const SynthParams p = synth_params(GgmlType::Q2_K, 0.01f, 42);
  std::vector<uint8_t> a(84), b(84), c(84);
  synth_block(p, 5, a.data());
  synth_block(p, 5, b.data());
  synth_block(p, 6, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(tensor_seed(1, "blk.0.attn_q_a.weight"), tensor_seed(1, "blk.1.attn_q_a.weight"));
  EXPECT_NE(tensor_seed(1, "x"), tensor_seed(2, "x"));
  // Q2_K scale fields carry the f16 d and dmin = 1.5 d exactly
  EXPECT_EQ(a[80] | (a[81] << 8), p.d);
  EXPECT_EQ(f16_to_f32(p.dmin), 1.5f * f16_to_f32(p.d));
}

TEST(SyntheticBlocks, F16ConversionMatchesTheReference) {
  for (float v : {0.0f, 1.0f, -2.5f, 0.000123f, 3.14159f, 65000.0f, 1e-3f, -7.77e-2f})
    EXPECT_EQ(f16_bits_of(v), f32_to_f16(v)) << v;
  for (float v : {0.0f, 1.0f, -2.5f, 3.14159f, 1e-20f, 1e20f}) EXPECT_EQ(bf16_bits_of(v), f32_to_bf16(v)) << v;
}

TEST(SyntheticBlocks, BadParametersAreRejected) {
  EXPECT_NE(error_of([] { synth_params(GgmlType::MXFP4, 0.1f, 1); }).find("not generated"), std::string::npos);
  EXPECT_THROW(synth_params(GgmlType::Q8_0, 0.0f, 1), Error);
  EXPECT_THROW(synth_params(GgmlType::Q8_0, NAN, 1), Error);
  EXPECT_THROW(synth_params(GgmlType::Q8_0, 1e-12f, 1), Error);  // scale underflows f16
}

TEST(SyntheticVectors, HashTablesHoldDistinctExpertsAndVectorsFollowMakeModel) {
  const Config c = Config::tiny(512);
  const std::vector<int32_t> ids = hash_table(c, 3);
  ASSERT_EQ(ids.size(), size_t{c.n_vocab} * c.n_expert_used);
  for (uint32_t r = 0; r < c.n_vocab; ++r) {
    std::set<int32_t> s(ids.begin() + r * c.n_expert_used, ids.begin() + (r + 1) * c.n_expert_used);
    ASSERT_EQ(s.size(), c.n_expert_used);
    for (int32_t e : s) ASSERT_TRUE(e >= 0 && static_cast<uint32_t>(e) < c.n_expert);
  }
  for (const model::TensorSpec& s : model::expected_tensors(c)) {
    if (s.kind != model::TensorKind::Vector) continue;
    std::vector<float> v(s.shape[0]);
    fill_vector(s, c, 9, v);
    for (float x : v) ASSERT_TRUE(std::isfinite(x)) << s.name;
    if (s.name.ends_with("norm.weight")) {
      for (float x : v) ASSERT_TRUE(x >= 0.9f && x <= 1.1f) << s.name;
    }
  }
}

}  // namespace
}  // namespace ds4::synth
