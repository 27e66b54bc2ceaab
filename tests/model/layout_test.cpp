// model layout: expected tensor sets (counted by hand from spec §2.2), recipe types, and
// validate_layout on generated tiny models (good and corrupted) and on sparse real-size
// Flash/Pro directories with ds4's exact types.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>

#include "common/error.h"
#include "gguf/reader.h"
#include "model/layout.h"
#include "model_files.h"

namespace ds4::model {
namespace {

using testing::drop;
using testing::find;
using testing::plan;
using testing::PlannedTensor;
using testing::write_model;

std::map<std::string, TensorSpec> by_name(const std::vector<TensorSpec>& specs) {
  std::map<std::string, TensorSpec> m;
  for (const auto& s : specs) m.emplace(s.name, s);
  return m;
}

std::vector<uint64_t> shape_of(const std::map<std::string, TensorSpec>& m, const std::string& name) {
  const auto it = m.find(name);
  if (it == m.end()) return {};
  return it->second.shape;
}

using Shape = std::vector<uint64_t>;

TEST(Layout, TinyTensorSetCountedByHand) {
  const Config c = Config::tiny(64);
  const auto specs = expected_tensors(c);
  // per layer: 3 HC-attn + 9 attention + 3 HC-ffn + norm + router + bias + 3 routed + 3 shared = 24,
  // + 4 compressor tensors when ratio != 0, + 6 indexer tensors when ratio == 4, + 1 hash table
  // when il < 3; ratios 0,0,4,128,4,128,4 -> 25+25+35+28+34+28+34 = 209; + 6 globals.
  EXPECT_EQ(specs.size(), 215u);
  size_t optional = 0;
  for (const auto& s : specs) optional += s.optional;
  EXPECT_EQ(optional, 7u);  // one exp_probs_b.bias per layer
  EXPECT_EQ(specs.front().name, "token_embd.weight");
  EXPECT_EQ(specs.back().name, "output.weight");

  const auto m = by_name(specs);
  EXPECT_EQ(m.size(), specs.size());  // names are unique
  EXPECT_EQ(shape_of(m, "token_embd.weight"), (Shape{256, 64}));
  EXPECT_EQ(shape_of(m, "output.weight"), (Shape{256, 64}));
  EXPECT_EQ(shape_of(m, "output_hc_fn.weight"), (Shape{1024, 4}));
  EXPECT_EQ(shape_of(m, "output_hc_scale.weight"), (Shape{1}));
  EXPECT_EQ(shape_of(m, "output_hc_base.weight"), (Shape{4}));
  EXPECT_EQ(shape_of(m, "blk.0.hc_attn_fn.weight"), (Shape{1024, 24}));
  EXPECT_EQ(shape_of(m, "blk.0.hc_attn_scale.weight"), (Shape{3}));
  EXPECT_EQ(shape_of(m, "blk.0.attn_q_a.weight"), (Shape{256, 64}));
  EXPECT_EQ(shape_of(m, "blk.0.attn_q_b.weight"), (Shape{64, 256}));
  EXPECT_EQ(shape_of(m, "blk.0.attn_kv.weight"), (Shape{256, 64}));
  EXPECT_EQ(shape_of(m, "blk.0.attn_sinks.weight"), (Shape{4}));
  EXPECT_EQ(shape_of(m, "blk.0.attn_output_a.weight"), (Shape{128, 64}));  // 2 heads x 64 in, 2 groups x 32 out
  EXPECT_EQ(shape_of(m, "blk.0.attn_output_b.weight"), (Shape{64, 256}));
  EXPECT_EQ(shape_of(m, "blk.0.ffn_gate_tid2eid.weight"), (Shape{3, 64}));
  EXPECT_EQ(shape_of(m, "blk.2.ffn_gate_tid2eid.weight"), (Shape{3, 64}));
  EXPECT_FALSE(m.count("blk.3.ffn_gate_tid2eid.weight"));
  EXPECT_FALSE(m.count("blk.0.attn_compressor_kv.weight"));
  EXPECT_FALSE(m.count("blk.1.indexer.proj.weight"));
  EXPECT_EQ(shape_of(m, "blk.2.attn_compressor_ape.weight"), (Shape{128, 4}));
  EXPECT_EQ(shape_of(m, "blk.2.attn_compressor_kv.weight"), (Shape{256, 128}));
  EXPECT_EQ(shape_of(m, "blk.2.attn_compressor_norm.weight"), (Shape{64}));
  EXPECT_EQ(shape_of(m, "blk.3.attn_compressor_ape.weight"), (Shape{64, 128}));
  EXPECT_EQ(shape_of(m, "blk.3.attn_compressor_gate.weight"), (Shape{256, 64}));
  EXPECT_FALSE(m.count("blk.3.indexer.attn_q_b.weight"));
  EXPECT_EQ(shape_of(m, "blk.2.indexer.attn_q_b.weight"), (Shape{64, 128}));
  EXPECT_EQ(shape_of(m, "blk.2.indexer.proj.weight"), (Shape{256, 4}));
  EXPECT_EQ(shape_of(m, "blk.2.indexer_compressor_ape.weight"), (Shape{64, 4}));
  EXPECT_EQ(shape_of(m, "blk.2.indexer_compressor_kv.weight"), (Shape{256, 64}));
  EXPECT_EQ(shape_of(m, "blk.2.indexer_compressor_norm.weight"), (Shape{32}));
  EXPECT_EQ(shape_of(m, "blk.6.ffn_gate_inp.weight"), (Shape{256, 16}));
  EXPECT_EQ(shape_of(m, "blk.6.exp_probs_b.bias"), (Shape{16}));
  EXPECT_TRUE(m.at("blk.6.exp_probs_b.bias").optional);
  EXPECT_EQ(shape_of(m, "blk.6.ffn_gate_exps.weight"), (Shape{256, 256, 16}));
  EXPECT_EQ(shape_of(m, "blk.6.ffn_down_exps.weight"), (Shape{256, 256, 16}));
  EXPECT_EQ(shape_of(m, "blk.6.ffn_down_shexp.weight"), (Shape{256, 256}));
  EXPECT_EQ(m.at("blk.6.ffn_down_exps.weight").layer, 6);
  EXPECT_EQ(m.at("output_norm.weight").layer, -1);
}

TEST(Layout, FlashShapesMatchSpecTable) {
  const auto specs = expected_tensors(Config::flash());
  // 43 x 24 + 41 compressed layers x 4 + 21 ratio-4 layers x 6 + 3 hash tables + 6 globals
  EXPECT_EQ(specs.size(), 43u * 24 + 41 * 4 + 21 * 6 + 3 + 6);
  const auto m = by_name(specs);
  EXPECT_EQ(shape_of(m, "token_embd.weight"), (Shape{4096, 129280}));
  EXPECT_EQ(shape_of(m, "output_hc_fn.weight"), (Shape{16384, 4}));
  EXPECT_EQ(shape_of(m, "output.weight"), (Shape{4096, 129280}));
  EXPECT_EQ(shape_of(m, "blk.0.hc_attn_fn.weight"), (Shape{16384, 24}));
  EXPECT_EQ(shape_of(m, "blk.0.hc_attn_base.weight"), (Shape{24}));
  EXPECT_EQ(shape_of(m, "blk.0.attn_q_a.weight"), (Shape{4096, 1024}));
  EXPECT_EQ(shape_of(m, "blk.0.attn_q_b.weight"), (Shape{1024, 32768}));
  EXPECT_EQ(shape_of(m, "blk.0.attn_kv.weight"), (Shape{4096, 512}));
  EXPECT_EQ(shape_of(m, "blk.0.attn_sinks.weight"), (Shape{64}));
  EXPECT_EQ(shape_of(m, "blk.0.attn_output_a.weight"), (Shape{4096, 8192}));
  EXPECT_EQ(shape_of(m, "blk.0.attn_output_b.weight"), (Shape{8192, 4096}));
  EXPECT_EQ(shape_of(m, "blk.2.attn_compressor_ape.weight"), (Shape{1024, 4}));
  EXPECT_EQ(shape_of(m, "blk.3.attn_compressor_ape.weight"), (Shape{512, 128}));
  EXPECT_EQ(shape_of(m, "blk.42.attn_compressor_kv.weight"), (Shape{4096, 1024}));
  EXPECT_EQ(shape_of(m, "blk.41.attn_compressor_gate.weight"), (Shape{4096, 512}));
  EXPECT_EQ(shape_of(m, "blk.2.attn_compressor_norm.weight"), (Shape{512}));
  EXPECT_EQ(shape_of(m, "blk.42.indexer.attn_q_b.weight"), (Shape{1024, 8192}));
  EXPECT_EQ(shape_of(m, "blk.42.indexer.proj.weight"), (Shape{4096, 64}));
  EXPECT_EQ(shape_of(m, "blk.2.indexer_compressor_ape.weight"), (Shape{256, 4}));
  EXPECT_EQ(shape_of(m, "blk.2.indexer_compressor_kv.weight"), (Shape{4096, 256}));
  EXPECT_EQ(shape_of(m, "blk.2.indexer_compressor_norm.weight"), (Shape{128}));
  EXPECT_EQ(shape_of(m, "blk.5.ffn_gate_inp.weight"), (Shape{4096, 256}));
  EXPECT_EQ(shape_of(m, "blk.5.exp_probs_b.bias"), (Shape{256}));
  EXPECT_EQ(shape_of(m, "blk.5.ffn_gate_exps.weight"), (Shape{4096, 2048, 256}));
  EXPECT_EQ(shape_of(m, "blk.5.ffn_up_exps.weight"), (Shape{4096, 2048, 256}));
  EXPECT_EQ(shape_of(m, "blk.5.ffn_down_exps.weight"), (Shape{2048, 4096, 256}));
  EXPECT_EQ(shape_of(m, "blk.5.ffn_gate_shexp.weight"), (Shape{4096, 2048}));
  EXPECT_EQ(shape_of(m, "blk.5.ffn_down_shexp.weight"), (Shape{2048, 4096}));
  EXPECT_EQ(shape_of(m, "blk.2.ffn_gate_tid2eid.weight"), (Shape{6, 129280}));
  EXPECT_FALSE(m.count("blk.3.ffn_gate_tid2eid.weight"));
  EXPECT_FALSE(m.count("blk.1.attn_compressor_ape.weight"));
}

TEST(Layout, ProHasCompressorsOnTheFirstLayers) {
  const auto m = by_name(expected_tensors(Config::pro()));
  EXPECT_EQ(shape_of(m, "blk.0.attn_compressor_ape.weight"), (Shape{512, 128}));
  EXPECT_FALSE(m.count("blk.0.indexer.proj.weight"));
  EXPECT_EQ(shape_of(m, "blk.60.indexer.attn_q_b.weight"), (Shape{1536, 8192}));
  EXPECT_EQ(shape_of(m, "blk.0.attn_output_a.weight"), (Shape{4096, 16384}));
  EXPECT_EQ(shape_of(m, "blk.0.attn_output_b.weight"), (Shape{16384, 7168}));
  EXPECT_EQ(shape_of(m, "blk.0.ffn_gate_exps.weight"), (Shape{7168, 3072, 384}));
  EXPECT_EQ(shape_of(m, "blk.0.ffn_gate_tid2eid.weight"), (Shape{6, 129280}));
}

TEST(Layout, RecipeTypes) {
  const auto m = by_name(expected_tensors(Config::tiny(64)));
  struct Row {
    const char* name;
    GgmlType q2, q4, f32;
  };
  using T = GgmlType;
  const Row rows[] = {
      {"token_embd.weight", T::F16, T::F16, T::F32},
      {"output.weight", T::Q8_0, T::Q8_0, T::F32},
      {"output_hc_fn.weight", T::F16, T::F16, T::F32},
      {"output_norm.weight", T::F32, T::F32, T::F32},
      {"blk.0.hc_attn_fn.weight", T::F16, T::F16, T::F32},
      {"blk.0.hc_attn_scale.weight", T::F32, T::F32, T::F32},
      {"blk.0.attn_q_a.weight", T::Q8_0, T::Q8_0, T::F32},
      {"blk.0.attn_output_b.weight", T::Q8_0, T::Q8_0, T::F32},
      {"blk.2.attn_compressor_kv.weight", T::F16, T::F16, T::F32},
      {"blk.2.indexer.proj.weight", T::F16, T::F16, T::F32},
      {"blk.2.indexer_compressor_norm.weight", T::F32, T::F32, T::F32},
      {"blk.2.ffn_gate_inp.weight", T::F16, T::F16, T::F32},
      {"blk.2.exp_probs_b.bias", T::F32, T::F32, T::F32},
      {"blk.2.ffn_gate_exps.weight", T::IQ2_XXS, T::Q4_K, T::F32},
      {"blk.2.ffn_up_exps.weight", T::IQ2_XXS, T::Q4_K, T::F32},
      {"blk.2.ffn_down_exps.weight", T::Q2_K, T::Q4_K, T::F32},
      {"blk.2.ffn_up_shexp.weight", T::Q8_0, T::Q8_0, T::F32},
      {"blk.2.ffn_gate_tid2eid.weight", T::I32, T::I32, T::I32},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    const TensorSpec& s = m.at(r.name);
    EXPECT_EQ(recipe_type(s, Recipe::q2), r.q2);
    EXPECT_EQ(recipe_type(s, Recipe::q4), r.q4);
    EXPECT_EQ(recipe_type(s, Recipe::f32), r.f32);
  }
  // every recipe type is accepted, and q2/q4 give ds4's exact types
  for (const auto& [name, s] : m) {
    for (Recipe rc : {Recipe::q2, Recipe::q4, Recipe::f32}) {
      const GgmlType t = recipe_type(s, rc);
      EXPECT_NE(std::find(s.accepted.begin(), s.accepted.end(), t), s.accepted.end()) << name;
      if (rc != Recipe::f32) {
        EXPECT_NE(std::find(s.exact.begin(), s.exact.end(), t), s.exact.end()) << name;
      }
    }
  }
  EXPECT_EQ(parse_recipe("q4"), Recipe::q4);
  EXPECT_EQ(parse_recipe("q3"), std::nullopt);
  EXPECT_EQ(recipe_name(Recipe::f32), "f32");
}

std::string layout_error(const Config& cfg, const std::vector<uint8_t>& bytes) {
  const gguf::Reader r = gguf::Reader::from_memory(bytes, "tiny.gguf");
  EXPECT_EQ(Config::from_gguf(r), cfg);
  try {
    validate_layout(cfg, r);
  } catch (const ds4::Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Layout, GeneratedTinyModelsValidate) {
  const Config cfg = Config::tiny(64);
  for (Recipe rc : {Recipe::q2, Recipe::q4}) {
    SCOPED_TRACE(std::string(recipe_name(rc)));
    EXPECT_EQ(layout_error(cfg, write_model(cfg, plan(cfg, rc))), "no error");
  }
  // without the optional router biases
  auto p = plan(cfg, Recipe::q2);
  for (int il = 0; il < 7; ++il) drop(p, "blk." + std::to_string(il) + ".exp_probs_b.bias");
  EXPECT_EQ(layout_error(cfg, write_model(cfg, p)), "no error");
  // the all-f32 recipe on a smaller custom shape (routed experts accept F32)
  Config micro = Config::tiny(32);
  micro.n_embd = 64;
  micro.n_expert = 4;
  micro.n_expert_used = 2;
  micro.n_ff_exp = 32;
  ASSERT_TRUE(micro.problems().empty());
  EXPECT_EQ(layout_error(micro, write_model(micro, plan(micro, Recipe::f32))), "no error");
}

TEST(Layout, CorruptedTinyModelsGiveTheRightMessage) {
  const Config cfg = Config::tiny(64);
  struct Case {
    const char* what;
    std::function<void(std::vector<PlannedTensor>&)> corrupt;
    std::string expected;
  };
  using T = GgmlType;
  const std::vector<Case> cases = {
      {"wrong shape", [](auto& p) { find(p, "blk.1.attn_q_a.weight").shape = {256, 96}; },
       "tiny.gguf: tensor layout does not match the custom model (1 problem):\n"
       "  - tensor 'blk.1.attn_q_a.weight' has shape [256, 96], expected [256, 64]"},
      {"wrong rank", [](auto& p) { find(p, "blk.0.attn_sinks.weight").shape = {4, 1}; },
       "  - tensor 'blk.0.attn_sinks.weight' has shape [4, 1], expected [4]"},
      {"norm not f32", [](auto& p) { find(p, "blk.0.attn_norm.weight").type = T::F16; },
       "  - tensor 'blk.0.attn_norm.weight' has type F16; expected F32"},
      {"weight type not accepted", [](auto& p) { find(p, "blk.0.attn_q_a.weight").type = T::Q4_K; },
       "  - tensor 'blk.0.attn_q_a.weight' has type Q4_K; expected one of F32, F16, BF16, Q8_0"},
      {"routed type not accepted", [](auto& p) { find(p, "blk.4.ffn_down_exps.weight").type = T::BF16; },
       "  - tensor 'blk.4.ffn_down_exps.weight' has type BF16; expected one of IQ2_XXS, Q2_K, Q4_K, F32, F16, Q8_0"},
      {"hash table type", [](auto& p) { find(p, "blk.1.ffn_gate_tid2eid.weight").type = T::F32; },
       "  - tensor 'blk.1.ffn_gate_tid2eid.weight' has type F32; expected I32"},
      {"missing tensor", [](auto& p) { drop(p, "blk.4.indexer.proj.weight"); },
       "  - missing tensor 'blk.4.indexer.proj.weight' (F16 [256, 4])"},
      {"missing hash table", [](auto& p) { drop(p, "blk.2.ffn_gate_tid2eid.weight"); },
       "tiny.gguf: tensor layout does not match the custom model (1 problem):\n"
       "  - missing tensor 'blk.2.ffn_gate_tid2eid.weight' (I32 [3, 64])"},
      {"missing routed", [](auto& p) { drop(p, "blk.6.ffn_up_exps.weight"); },
       "  - missing tensor 'blk.6.ffn_up_exps.weight' (one of IQ2_XXS, Q2_K, Q4_K [256, 256, 16])"},
      {"hash table on a routed layer", [](auto& p) { p.push_back({"blk.3.ffn_gate_tid2eid.weight", T::I32, {3, 64}}); },
       "  - unexpected tensor 'blk.3.ffn_gate_tid2eid.weight' (I32 [3, 64]) is not part of the layout"},
      {"indexer on a ratio-128 layer", [](auto& p) { p.push_back({"blk.3.indexer.proj.weight", T::F16, {256, 4}}); },
       "  - unexpected tensor 'blk.3.indexer.proj.weight' (F16 [256, 4]) is not part of the layout"},
      {"gate/up mismatch", [](auto& p) { find(p, "blk.5.ffn_up_exps.weight").type = T::Q4_K; },
       "  - layer 5: routed gate and up experts must share a type, got IQ2_XXS and Q4_K"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto p = plan(cfg, Recipe::q2);
    c.corrupt(p);
    const std::string err = layout_error(cfg, write_model(cfg, p));
    EXPECT_NE(err.find(c.expected), std::string::npos) << err;
  }
}

TEST(Layout, UnknownTypeAndPartialBlockRows) {
  const Config cfg = Config::tiny(64);
  std::vector<uint8_t> bytes = write_model(cfg, plan(cfg, Recipe::q2));
  const gguf::Reader r = gguf::Reader::from_memory(bytes, "tiny.gguf");
  // patch the type id of blk.0.attn_kv.weight to an unknown id, and dims[0] of
  // blk.1.attn_kv.weight (Q8_0) to 240 (7.5 blocks); both are directory-only edits
  auto type_field = [&](const gguf::TensorInfo& t) { return t.directory_offset + 8 + t.name.size() + 4 + 8 * t.n_dims; };
  const gguf::TensorInfo& kv0 = r.tensor("blk.0.attn_kv.weight");
  const gguf::TensorInfo& kv1 = r.tensor("blk.1.attn_kv.weight");
  const uint32_t unknown = 77;
  const uint64_t partial = 240;
  std::memcpy(bytes.data() + type_field(kv0), &unknown, 4);
  std::memcpy(bytes.data() + kv1.directory_offset + 8 + kv1.name.size() + 4, &partial, 8);
  const gguf::Reader patched = gguf::Reader::from_memory(bytes, "tiny.gguf");
  EXPECT_FALSE(patched.tensor("blk.0.attn_kv.weight").type_known);
  try {
    validate_layout(cfg, patched);
    ADD_FAILURE() << "no error";
  } catch (const ds4::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "tiny.gguf: tensor layout does not match the custom model (3 problems):\n"
              "  - tensor 'blk.0.attn_kv.weight' has unknown ggml type 77; expected one of F32, F16, BF16, Q8_0\n"
              "  - tensor 'blk.1.attn_kv.weight' has shape [240, 64], expected [256, 64]\n"
              "  - tensor 'blk.1.attn_kv.weight' row length 240 is not a multiple of the Q8_0 block size 32");
  }
}

TEST(Layout, LongProblemListsAreCapped) {
  const Config cfg = Config::tiny(64);
  gguf::Writer w;
  cfg.write_metadata(w);
  const auto bytes = w.to_bytes();  // metadata only, no tensors
  const gguf::Reader r = gguf::Reader::from_memory(bytes, "empty.gguf");
  try {
    validate_layout(cfg, r);
    ADD_FAILURE() << "no error";
  } catch (const ds4::Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("empty.gguf: tensor layout does not match the custom model (208 problems):\n"
                        "  - missing tensor 'token_embd.weight' (F16 [256, 64])\n",
                        0),
              0u)
        << msg;
    EXPECT_NE(msg.find("\n  - ... and 158 more"), std::string::npos);
  }
}

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::path(::testing::TempDir()) / ("ds4_layout_" + name);
}

// Real-size directories (sparse files, overlapping data): ds4's exact types are enforced.
TEST(Layout, RealShapesEnforceDs4Types) {
  for (const Config& cfg : {Config::flash(), Config::pro()}) {
    const std::string name(variant_name(cfg.variant()));
    SCOPED_TRACE(name);
    const auto path = temp_path("real.gguf");
    for (Recipe rc : {Recipe::q2, Recipe::q4}) {
      testing::write_sparse_model(path, cfg, plan(cfg, rc));
      const gguf::Reader r = gguf::Reader::open(path);
      EXPECT_EQ(Config::from_gguf(r), cfg);
      EXPECT_NO_THROW(validate_layout(cfg, r));
    }
    // F16 attention and F32 routed experts are fine for custom shapes but not for ds4's models
    auto p = plan(cfg, Recipe::q2);
    find(p, "blk.0.attn_q_a.weight").type = GgmlType::F16;
    find(p, "blk.1.ffn_gate_exps.weight").type = GgmlType::F32;
    find(p, "blk.1.ffn_up_exps.weight").type = GgmlType::F32;
    testing::write_sparse_model(path, cfg, p);
    const gguf::Reader r = gguf::Reader::open(path);
    try {
      validate_layout(cfg, r);
      ADD_FAILURE() << "no error";
    } catch (const ds4::Error& e) {
      EXPECT_EQ(std::string(e.what()),
                path.string() + ": tensor layout does not match the " + name + " model (3 problems):\n" +
                    "  - tensor 'blk.0.attn_q_a.weight' has type F16; " + name + " requires Q8_0\n" +
                    "  - tensor 'blk.1.ffn_gate_exps.weight' has type F32; " + name +
                    " requires one of IQ2_XXS, Q2_K, Q4_K\n" + "  - tensor 'blk.1.ffn_up_exps.weight' has type F32; " +
                    name + " requires one of IQ2_XXS, Q2_K, Q4_K");
    }
    std::filesystem::remove(path);
  }
}

}  // namespace
}  // namespace ds4::model
