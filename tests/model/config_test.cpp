// model::Config: metadata round trips, the real Flash/Pro values (accepted; any one-value change
// rejected), every general invariant, ds4's metadata type rules, and derived sizes checked
// against the numbers of spec §2.2.
#include <gtest/gtest.h>

#include <functional>

#include "common/error.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "model/config.h"

namespace ds4::model {
namespace {

using gguf::Value;

std::vector<uint8_t> metadata_file(const Config& c, const std::function<void(gguf::Writer&)>& extra = {}) {
  gguf::Writer w;
  c.write_metadata(w);
  if (extra) extra(w);
  return w.to_bytes();
}

// A file with every key of `c` except `skip`, plus whatever `extra` adds.
std::vector<uint8_t> metadata_without(const Config& c, const std::string& skip,
                                      const std::function<void(gguf::Writer&)>& extra = {}) {
  gguf::Writer all;
  c.write_metadata(all);
  gguf::Writer w;
  for (const auto& [k, v] : all.metadata()) {
    if (k != skip) w.set(k, v);
  }
  if (extra) extra(w);
  return w.to_bytes();
}

std::string load_error(const std::vector<uint8_t>& bytes) {
  try {
    Config::from_gguf(gguf::Reader::from_memory(bytes, "model.gguf"));
  } catch (const ds4::Error& e) {
    return e.what();
  }
  return "no error";
}

bool has_problem(const Config& c, const std::string& text) {
  for (const std::string& p : c.problems()) {
    if (p == text) return true;
  }
  ADD_FAILURE() << "problem not reported: " << text << "\nreported:\n"
                << [&] {
                     std::string all;
                     for (const auto& p : c.problems()) all += "  " + p + "\n";
                     return all;
                   }();
  return false;
}

TEST(Config, RoundTripsThroughGguf) {
  for (const Config& c : {Config::tiny(64), Config::nano(), Config::flash(), Config::pro()}) {
    const auto bytes = metadata_file(c);
    const Config back = Config::from_gguf(gguf::Reader::from_memory(bytes, "model.gguf"));
    EXPECT_EQ(back, c);
  }
  Config with_groups = Config::tiny(64);
  with_groups.n_expert_group = 0;
  with_groups.n_expert_group_used = 0;
  with_groups.context_length.reset();
  const auto bytes = metadata_file(with_groups);
  EXPECT_EQ(Config::from_gguf(gguf::Reader::from_memory(bytes, "m")), with_groups);
}

// ds4-nano (docs/nano.md) is valid, custom, keeps the full vocabulary and has every layer kind.
TEST(Config, NanoHasEveryLayerKind) {
  const Config c = Config::nano();
  EXPECT_TRUE(c.problems().empty());
  EXPECT_EQ(c.variant(), Variant::Custom);
  EXPECT_EQ(c.n_vocab, 129280u);
  EXPECT_EQ(c.compress_ratios, (std::vector<uint32_t>{0, 0, 4, 128, 4, 128}));
  EXPECT_TRUE(c.is_hash_layer(1));
  EXPECT_FALSE(c.is_hash_layer(2));
  EXPECT_EQ(c.nope_dim(), 96u);  // FP8 blocks: one of 64 and a trailing one of 32
  EXPECT_EQ(c.hc_dim(), 1024u);
}

TEST(Config, FlashValuesAndDerivedSizes) {
  const Config c = Config::flash();
  EXPECT_TRUE(c.problems().empty());
  EXPECT_EQ(c.variant(), Variant::Flash);
  EXPECT_EQ(c.hc_dim(), 16384u);
  EXPECT_EQ(c.hc_mix(), 24u);
  EXPECT_EQ(c.q_dim(), 32768u);
  EXPECT_EQ(c.heads_per_group(), 8u);
  EXPECT_EQ(c.group_in_dim(), 4096u);
  EXPECT_EQ(c.out_low_dim(), 8192u);
  EXPECT_EQ(c.nope_dim(), 448u);
  EXPECT_EQ(c.indexer_q_dim(), 8192u);
  EXPECT_EQ(c.indexer_compressor_width(), 256u);
  EXPECT_EQ(c.compressor_width(0), 0u);
  EXPECT_EQ(c.compressor_width(2), 1024u);
  EXPECT_EQ(c.compressor_width(3), 512u);
  // spec §1.2: 0,0 then 4 on even and 128 on odd layers; the last layer (42) is ratio 4
  int n4 = 0, n128 = 0;
  for (uint32_t il = 0; il < 43; ++il) {
    const uint32_t r = c.compress_ratio(il);
    EXPECT_EQ(r, il < 2 ? 0u : (il % 2 == 0 ? 4u : 128u)) << il;
    n4 += r == 4;
    n128 += r == 128;
  }
  EXPECT_EQ(n4, 21);
  EXPECT_EQ(n128, 20);
  EXPECT_TRUE(c.is_hash_layer(2));
  EXPECT_FALSE(c.is_hash_layer(3));
  EXPECT_EQ(c.swiglu_clamp_of(42), 10.0f);
  EXPECT_THROW(c.compress_ratio(43), ds4::Error);
  EXPECT_THROW(c.swiglu_clamp_of(43), ds4::Error);
}

struct Mutation {
  std::string name;
  std::function<void(Config&)> apply;
  std::string problem;  // exact problem line expected
};

TEST(Config, FlashRejectsAnyOneValueChange) {
  const std::vector<Mutation> mutations = {
      {"vocab", [](Config& c) { c.n_vocab = 129281; }, "deepseek4.vocab_size is 129281; DeepSeek V4 Flash requires 129280"},
      {"heads", [](Config& c) { c.n_head = 32; }, "deepseek4.attention.head_count is 32; DeepSeek V4 Flash requires 64"},
      {"used", [](Config& c) { c.n_expert_used = 8; }, "deepseek4.expert_used_count is 8; DeepSeek V4 Flash requires 6"},
      {"topk", [](Config& c) { c.indexer_top_k = 1024; },
       "deepseek4.attention.indexer.top_k is 1024; DeepSeek V4 Flash requires 512"},
      {"hash", [](Config& c) { c.n_hash_layer = 2; }, "deepseek4.hash_layer_count is 2; DeepSeek V4 Flash requires 3"},
      {"swa", [](Config& c) { c.n_swa = 256; }, "deepseek4.attention.sliding_window is 256; DeepSeek V4 Flash requires 128"},
      {"sinkhorn", [](Config& c) { c.hc_sinkhorn_iter = 10; },
       "deepseek4.hyper_connection.sinkhorn_iterations is 10; DeepSeek V4 Flash requires 20"},
      {"freq", [](Config& c) { c.rope_freq_base = 10001.0f; },
       "deepseek4.rope.freq_base is 10001; DeepSeek V4 Flash requires 10000"},
      {"eps", [](Config& c) { c.hc_eps = 2e-6f; }, "deepseek4.hyper_connection.epsilon is 2e-06; DeepSeek V4 Flash requires 1e-06"},
      {"scale", [](Config& c) { c.expert_weight_scale = 2.5f; },
       "deepseek4.expert_weights_scale is 2.5; DeepSeek V4 Flash requires 1.5"},
      {"ctx", [](Config& c) { c.rope_orig_ctx = 32768; },
       "deepseek4.rope.scaling.original_context_length is 32768; DeepSeek V4 Flash requires 65536"},
      {"norm", [](Config& c) { c.expert_weights_norm = false; },
       "deepseek4.expert_weights_norm is false; DeepSeek V4 Flash requires true"},
      {"ratio", [](Config& c) { c.compress_ratios[5] = 4; },
       "deepseek4.attention.compress_ratios differs from DeepSeek V4 Flash's schedule: [5] is 4, expected 128"},
      {"clamp", [](Config& c) { c.swiglu_clamp[7] = 9.0f; },
       "deepseek4.swiglu_clamp_exp[7] is 9; DeepSeek V4 Flash requires 10"},
  };
  for (const Mutation& m : mutations) {
    SCOPED_TRACE(m.name);
    Config c = Config::flash();
    m.apply(c);
    EXPECT_EQ(c.variant(), Variant::Flash);
    EXPECT_TRUE(has_problem(c, m.problem));
    // the same change written to a file is rejected at load time with the file name
    const std::string err = load_error(metadata_file(c));
    EXPECT_NE(err.find("model.gguf: invalid DeepSeek V4 configuration"), std::string::npos) << err;
    EXPECT_NE(err.find(m.problem), std::string::npos) << err;
  }
  Config close = Config::flash();
  close.rope_freq_base = 10000.005f;  // within ds4's relative tolerance 1e-6
  close.rms_eps = 1.0000005e-6f;      // relative 5e-7
  EXPECT_TRUE(close.problems().empty());
  close.rms_eps = 1.5e-6f;            // ds4 would accept this (absolute 1e-6); we do not
  EXPECT_TRUE(has_problem(close, "deepseek4.attention.layer_norm_rms_epsilon is 1.5e-06; DeepSeek V4 Flash requires 1e-06"));
  close.rms_eps = 1e-6f;
  EXPECT_TRUE(close.problems().empty());
}

TEST(Config, ProValues) {
  const Config c = Config::pro();
  EXPECT_TRUE(c.problems().empty());
  EXPECT_EQ(c.variant(), Variant::Pro);
  EXPECT_EQ(c.compress_ratio(0), 128u);
  EXPECT_EQ(c.compress_ratio(1), 128u);
  EXPECT_EQ(c.compress_ratio(2), 4u);
  EXPECT_EQ(c.compress_ratio(60), 4u);
  EXPECT_EQ(c.heads_per_group(), 8u);
  EXPECT_EQ(c.group_in_dim(), 4096u);
  EXPECT_EQ(c.out_low_dim(), 16384u);
  EXPECT_EQ(c.q_dim(), 65536u);
  EXPECT_EQ(c.hc_dim(), 28672u);
  Config wrong = Config::pro();
  wrong.compress_ratios[0] = 0;
  EXPECT_TRUE(has_problem(wrong, "deepseek4.attention.compress_ratios differs from DeepSeek V4 Pro's schedule: [0] is 0, expected 128"));
  Config flashy = Config::pro();
  flashy.expert_weight_scale = 1.5f;
  EXPECT_TRUE(has_problem(flashy, "deepseek4.expert_weights_scale is 1.5; DeepSeek V4 Pro requires 2.5"));
}

TEST(Config, TinyValuesAndDerivedSizes) {
  const Config c = Config::tiny(1000);
  EXPECT_TRUE(c.problems().empty());
  EXPECT_EQ(c.variant(), Variant::Custom);
  EXPECT_EQ(c.n_vocab, 1000u);
  EXPECT_EQ(c.compress_ratios, (std::vector<uint32_t>{0, 0, 4, 128, 4, 128, 4}));
  EXPECT_EQ(c.hc_dim(), 1024u);
  EXPECT_EQ(c.hc_mix(), 24u);
  EXPECT_EQ(c.q_dim(), 256u);
  EXPECT_EQ(c.heads_per_group(), 2u);
  EXPECT_EQ(c.group_in_dim(), 128u);
  EXPECT_EQ(c.out_low_dim(), 64u);
  EXPECT_EQ(c.nope_dim(), 48u);
  EXPECT_EQ(c.indexer_q_dim(), 128u);
  EXPECT_EQ(c.compressor_width(2), 128u);
  EXPECT_EQ(c.compressor_width(3), 64u);
  EXPECT_EQ(c.indexer_compressor_width(), 64u);
  EXPECT_EQ(c.rope_freq_base, 10000.0f);           // "other values as Flash"
  EXPECT_EQ(c.compress_rope_freq_base, 160000.0f);
  EXPECT_EQ(c.expert_weight_scale, 1.5f);
}

TEST(Config, EveryGeneralInvariantIsReported) {
  const std::vector<Mutation> mutations = {
      {"zero layers", [](Config& c) { c.n_layer = 0; c.compress_ratios.clear(); c.swiglu_clamp.clear(); c.n_hash_layer = 0; },
       "deepseek4.block_count is 0; it must be positive"},
      {"zero vocab", [](Config& c) { c.n_vocab = 0; }, "deepseek4.vocab_size is 0; it must be positive"},
      {"zero topk", [](Config& c) { c.indexer_top_k = 0; }, "deepseek4.attention.indexer.top_k is 0; it must be positive"},
      {"zero hc", [](Config& c) { c.n_hc = 0; }, "deepseek4.hyper_connection.count is 0; it must be positive"},
      {"kv heads", [](Config& c) { c.n_head_kv = 2; },
       "deepseek4.attention.head_count_kv is 2; the model has exactly 1 KV head (one shared K = V row)"},
      {"k != v", [](Config& c) { c.value_dim = 32; },
       "deepseek4.attention.key_length (64) differs from deepseek4.attention.value_length (32); K and V are the same row"},
      {"odd rope", [](Config& c) { c.n_rot = 15; }, "deepseek4.rope.dimension_count 15 is odd; RoPE rotates pairs"},
      {"rope > key", [](Config& c) { c.n_rot = 66; c.indexer_head_dim = 128; },
       "deepseek4.rope.dimension_count 66 exceeds deepseek4.attention.key_length 64"},
      {"rope > indexer", [](Config& c) { c.indexer_head_dim = 8; },
       "deepseek4.rope.dimension_count 16 exceeds deepseek4.attention.indexer.key_length 8 (indexer heads rotate their tail too)"},
      {"indexer pow2", [](Config& c) { c.indexer_head_dim = 48; },
       "deepseek4.attention.indexer.key_length 48 is not a power of two (the indexer applies a Hadamard transform)"},
      {"groups", [](Config& c) { c.n_out_group = 3; },
       "deepseek4.attention.head_count 4 is not a multiple of deepseek4.attention.output_group_count 3"},
      {"used > experts", [](Config& c) { c.n_expert_used = 17; },
       "deepseek4.expert_used_count 17 exceeds deepseek4.expert_count 16"},
      {"shared", [](Config& c) { c.n_expert_shared = 2; },
       "deepseek4.expert_shared_count is 2; the model has exactly 1 shared expert"},
      {"hash > layers", [](Config& c) { c.n_hash_layer = 8; }, "deepseek4.hash_layer_count 8 exceeds deepseek4.block_count 7"},
      {"groups set", [](Config& c) { c.n_expert_group = 8; },
       "deepseek4.expert_group_count is 8; group-limited routing is not supported (must be 0 or absent)"},
      {"group used set", [](Config& c) { c.n_expert_group_used = 2; },
       "deepseek4.expert_group_used_count is 2; group-limited routing is not supported (must be 0 or absent)"},
      {"ratio value", [](Config& c) { c.compress_ratios[3] = 64; },
       "deepseek4.attention.compress_ratios[3] is 64; expected 0, 4 or 128"},
      {"ratio count", [](Config& c) { c.compress_ratios.pop_back(); },
       "deepseek4.attention.compress_ratios has 6 entries, expected 7 (deepseek4.block_count)"},
      {"clamp count", [](Config& c) { c.swiglu_clamp.push_back(10.0f); },
       "deepseek4.swiglu_clamp_exp has 8 entries, expected 7 (deepseek4.block_count)"},
      {"clamp value", [](Config& c) { c.swiglu_clamp[1] = -1.0f; },
       "deepseek4.swiglu_clamp_exp[1] is -1; it must be a positive finite number"},
      {"eps", [](Config& c) { c.rms_eps = 0.0f; },
       "deepseek4.attention.layer_norm_rms_epsilon is 0; it must be a positive finite number"},
      {"nan base", [](Config& c) { c.compress_rope_freq_base = std::nanf(""); },
       "deepseek4.attention.compress_rope_freq_base is nan; it must be a positive finite number"},
      {"beta order", [](Config& c) { c.rope_yarn_beta_fast = 0.5f; },
       "deepseek4.rope.scaling.yarn_beta_fast (0.5) must exceed deepseek4.rope.scaling.yarn_beta_slow (1)"},
      {"orig ctx", [](Config& c) { c.rope_orig_ctx = 0; },
       "deepseek4.rope.scaling.original_context_length is 0; it must be positive"},
  };
  for (const Mutation& m : mutations) {
    SCOPED_TRACE(m.name);
    Config c = Config::tiny(64);
    m.apply(c);
    EXPECT_TRUE(has_problem(c, m.problem));
  }
  // several at once: one error lists all of them
  Config c = Config::tiny(64);
  c.n_head_kv = 2;
  c.n_rot = 15;
  c.n_expert_used = 17;
  try {
    c.validate("m.gguf");
    ADD_FAILURE() << "no error";
  } catch (const ds4::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "m.gguf: invalid DeepSeek V4 configuration (3 problems):\n"
              "  - deepseek4.attention.head_count_kv is 2; the model has exactly 1 KV head (one shared K = V row)\n"
              "  - deepseek4.rope.dimension_count 15 is odd; RoPE rotates pairs\n"
              "  - deepseek4.expert_used_count 17 exceeds deepseek4.expert_count 16");
  }
}

TEST(Config, MetadataTypeRules) {
  const Config tiny = Config::tiny(64);
  // u32 keys need u32
  EXPECT_EQ(load_error(metadata_without(tiny, "deepseek4.block_count",
                                        [](gguf::Writer& w) { w.set("deepseek4.block_count", Value::f32(7)); })),
            "model.gguf: invalid DeepSeek V4 configuration (1 problem):\n"
            "  - metadata key 'deepseek4.block_count' has type f32, expected u32");
  // two missing keys are listed together
  {
    gguf::Writer all;
    tiny.write_metadata(all);
    gguf::Writer w;
    for (const auto& [k, v] : all.metadata()) {
      if (k != "deepseek4.vocab_size" && k != "deepseek4.expert_weights_norm") w.set(k, v);
    }
    EXPECT_EQ(load_error(w.to_bytes()),
              "model.gguf: invalid DeepSeek V4 configuration (2 problems):\n"
              "  - metadata key 'deepseek4.vocab_size' is missing (expected u32)\n"
              "  - metadata key 'deepseek4.expert_weights_norm' is missing (expected bool)");
  }
  // f32 keys accept f64, u32 and i32
  for (const Value& v : {Value::f64(10000.0), Value::u32(10000), Value::i32(10000)}) {
    const auto bytes = metadata_without(tiny, "deepseek4.rope.freq_base",
                                        [&](gguf::Writer& w) { w.set("deepseek4.rope.freq_base", v); });
    EXPECT_EQ(Config::from_gguf(gguf::Reader::from_memory(bytes, "m")).rope_freq_base, 10000.0f);
  }
  // u64 keys accept u32
  {
    const auto bytes = metadata_without(tiny, "deepseek4.rope.scaling.original_context_length", [](gguf::Writer& w) {
      w.set("deepseek4.rope.scaling.original_context_length", Value::u32(65536));
    });
    EXPECT_EQ(Config::from_gguf(gguf::Reader::from_memory(bytes, "m")).rope_orig_ctx, 65536u);
  }
  // compress_ratios: u32 items accepted, f32 items rejected, short rejected, long truncated, negative rejected
  {
    const uint32_t r[] = {0, 0, 4, 128, 4, 128, 4};
    const auto bytes = metadata_without(tiny, "deepseek4.attention.compress_ratios", [&](gguf::Writer& w) {
      w.set("deepseek4.attention.compress_ratios", Value::u32_array(r));
    });
    EXPECT_EQ(Config::from_gguf(gguf::Reader::from_memory(bytes, "m")), tiny);
  }
  {
    const float r[] = {0, 0, 4, 128, 4, 128, 4};
    EXPECT_EQ(load_error(metadata_without(tiny, "deepseek4.attention.compress_ratios", [&](gguf::Writer& w) {
                w.set("deepseek4.attention.compress_ratios", Value::f32_array(r));
              })),
              "model.gguf: invalid DeepSeek V4 configuration (1 problem):\n"
              "  - metadata key 'deepseek4.attention.compress_ratios' has type array of f32, expected array of i32 or u32");
  }
  {
    const int32_t r[] = {0, 0, 4};
    EXPECT_EQ(load_error(metadata_without(tiny, "deepseek4.attention.compress_ratios", [&](gguf::Writer& w) {
                w.set("deepseek4.attention.compress_ratios", Value::i32_array(r));
              })),
              "model.gguf: invalid DeepSeek V4 configuration (1 problem):\n"
              "  - metadata key 'deepseek4.attention.compress_ratios' has 3 entries, fewer than deepseek4.block_count 7");
  }
  {
    const int32_t r[] = {0, 0, 4, 128, 4, 128, 4, 128, 4};  // ds4 accepts >= block_count entries
    const auto bytes = metadata_without(tiny, "deepseek4.attention.compress_ratios", [&](gguf::Writer& w) {
      w.set("deepseek4.attention.compress_ratios", Value::i32_array(r));
    });
    EXPECT_EQ(Config::from_gguf(gguf::Reader::from_memory(bytes, "m")).compress_ratios.size(), 7u);
  }
  {
    const int32_t r[] = {0, 0, -4, 128, 4, 128, 4};
    EXPECT_EQ(load_error(metadata_without(tiny, "deepseek4.attention.compress_ratios", [&](gguf::Writer& w) {
                w.set("deepseek4.attention.compress_ratios", Value::i32_array(r));
              })),
              "model.gguf: invalid DeepSeek V4 configuration (1 problem):\n"
              "  - metadata key 'deepseek4.attention.compress_ratios'[2] is negative (-4)");
  }
  // swiglu clamp: f64 items accepted, i32 rejected
  {
    std::vector<Value> items(7, Value::f64(10.0));
    const auto bytes = metadata_without(tiny, "deepseek4.swiglu_clamp_exp", [&](gguf::Writer& w) {
      w.set("deepseek4.swiglu_clamp_exp", Value::array(gguf::ValueType::F64, items));
    });
    EXPECT_EQ(Config::from_gguf(gguf::Reader::from_memory(bytes, "m")), tiny);
    const int32_t r[] = {10, 10, 10, 10, 10, 10, 10};
    EXPECT_EQ(load_error(metadata_without(tiny, "deepseek4.swiglu_clamp_exp", [&](gguf::Writer& w) {
                w.set("deepseek4.swiglu_clamp_exp", Value::i32_array(r));
              })),
              "model.gguf: invalid DeepSeek V4 configuration (1 problem):\n"
              "  - metadata key 'deepseek4.swiglu_clamp_exp' has type array of i32, expected array of f32 or f64");
  }
  // optional expert group counts: 0 accepted, non-zero rejected
  {
    const auto ok = metadata_file(tiny, [](gguf::Writer& w) { w.set("deepseek4.expert_group_count", Value::u32(0)); });
    EXPECT_EQ(Config::from_gguf(gguf::Reader::from_memory(ok, "m")).n_expert_group, 0u);
    const auto bad = metadata_file(tiny, [](gguf::Writer& w) { w.set("deepseek4.expert_group_used_count", Value::u32(4)); });
    EXPECT_NE(load_error(bad).find("deepseek4.expert_group_used_count is 4; group-limited routing is not supported"),
              std::string::npos);
  }
  // bool needs bool
  EXPECT_NE(load_error(metadata_without(tiny, "deepseek4.expert_weights_norm", [](gguf::Writer& w) {
              w.set("deepseek4.expert_weights_norm", Value::u8(1));
            })).find("metadata key 'deepseek4.expert_weights_norm' has type u8, expected bool"),
            std::string::npos);
}

}  // namespace
}  // namespace ds4::model
