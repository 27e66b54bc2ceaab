// ds4-bench: the frontier list, greedy choice, CSV formatting and option checks as units, and
// end-to-end runs of the binary on the tiny q2 model: CSV shape, positive values, snapshot sizes
// equal to a Session::save() of the same prefix, and exit code 2 with a clear message for every
// kind of bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench_options.h"
#include "common/error.h"
#include "csv.h"
#include "engine/engine.h"
#include "engine/session.h"
#include "frontiers.h"
#include "sweep.h"
#include "synthetic_shards.h"
#include "model/kv_state.h"

namespace ds4::bench {
namespace {

namespace fs = std::filesystem;

const std::string kModel = std::string(DS4_BINARY_DIR) + "/models/ds4-tiny-q2.gguf";
const std::string kText = std::string(DS4_SHARED_DIR) + "/testdata/text/tiny_shakespeare.txt";

// ---- units ----

TEST(Frontiers, AdditiveMultiplicativeAndClamped) {
  EXPECT_EQ(frontiers(2048, 8192, 2048, 1.0), (std::vector<int64_t>{2048, 4096, 6144, 8192}));
  EXPECT_EQ(frontiers(2048, 7000, 2048, 1.0), (std::vector<int64_t>{2048, 4096, 6144, 7000}));
  EXPECT_EQ(frontiers(100, 1000, 1, 3.0), (std::vector<int64_t>{100, 300, 900, 1000}));
  // ceil(3 * 1.5) = 5, ceil(7.5) = 8, ceil(12) = 12, then clamped to 15.
  EXPECT_EQ(frontiers(3, 15, 1, 1.5), (std::vector<int64_t>{3, 5, 8, 12, 15}));
  // A factor too small to move an integer still advances by one token.
  EXPECT_EQ(frontiers(1, 3, 1, 1.01), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(frontiers(5, 5, 7, 1.0), (std::vector<int64_t>{5}));
}

TEST(Frontiers, RejectsBadSteps) {
  EXPECT_THROW(frontiers(0, 5, 1, 1.0), Error);
  EXPECT_THROW(frontiers(6, 5, 1, 1.0), Error);
  EXPECT_THROW(frontiers(1, 5, 0, 1.0), Error);
  EXPECT_THROW(frontiers(1, 5, 1, 0.5), Error);
  EXPECT_THROW(frontiers(1, 5, 1, NAN), Error);
}

TEST(GreedyToken, TiesNanAndExclusion) {
  const std::vector<float> l{1.0f, 3.0f, NAN, 3.0f, 2.0f};
  EXPECT_EQ(greedy_token(l, std::nullopt), 1);  // tie between 1 and 3 goes to the lower id
  EXPECT_EQ(greedy_token(l, 1), 3);
  EXPECT_EQ(greedy_token(std::vector<float>{NAN, -5.0f}, std::nullopt), 1);
  EXPECT_THROW(greedy_token(std::vector<float>{NAN, NAN}, std::nullopt), Error);
  EXPECT_THROW(greedy_token(std::vector<float>{2.0f}, 0), Error);
}

TEST(Csv, HeaderStartsWithDs4ColumnsAndRowIsHandComputed) {
  EXPECT_EQ(csv_header().rfind("ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes,", 0), 0u);
  FrontierResult r;
  r.ctx_tokens = 4096;
  r.prefill_tokens = 2048;
  r.prefill_s = 4.0;       // 512 tok/s
  r.prefill_cpu_s = 3.5;
  r.gen_tokens = 100;
  r.gen_s = 8.0;           // 12.5 tok/s; 12.5 * 2e8 B = 2.5 GB/s
  r.gen_cpu_s = 7.25;
  r.kvcache_bytes = 123456;
  EXPECT_EQ(csv_row(r, 200'000'000),
            "4096,2048,512.00,100,12.50,123456,4.000000,3.500000,8.000000,7.250000,2.500");
  r.gen_tokens = 0;
  r.gen_s = 0;
  EXPECT_EQ(csv_row(r, 200'000'000),
            "4096,2048,512.00,0,0.00,123456,4.000000,3.500000,0.000000,7.250000,0.000");
}

BenchOptions parse(std::vector<std::string> args) {
  auto o = parse_bench_options(args, kModel);
  if (!o) throw std::runtime_error("help");
  return *o;
}

TEST(Options, DefaultsAreDs4s) {
  const auto o = parse({"--prompt-file", kText});
  EXPECT_EQ(o.model, kModel);
  EXPECT_EQ(o.ctx_start, 2048);
  EXPECT_EQ(o.ctx_max, 32768);
  EXPECT_EQ(o.step_incr, 2048);
  EXPECT_EQ(o.step_mul, 1.0);
  EXPECT_EQ(o.gen_tokens, 128);
  EXPECT_EQ(effective_ctx_alloc(o), 32768 + 128 + 1);
  EXPECT_EQ(o.backend, "auto");
}

TEST(Options, Ds4Spellings) {
  const auto o = parse({"--chat-prompt-file", kText, "-sys", "be brief", "-n", "7", "-t", "2",
                        "--cpu", "--ctx-start", "10", "--ctx-max", "20", "--step-mul", "1.5",
                        "--csv", "out.csv", "--ctx-alloc", "40"});
  EXPECT_EQ(o.system, "be brief");
  EXPECT_EQ(o.gen_tokens, 7);
  EXPECT_EQ(o.threads, 2);
  EXPECT_EQ(o.backend, "cpu");
  EXPECT_EQ(o.step_mul, 1.5);
  EXPECT_EQ(o.csv, "out.csv");
  EXPECT_EQ(effective_ctx_alloc(o), 40);
  EXPECT_EQ(parse({"--prompt-file", kText, "--tokens", "3"}).gen_tokens, 3);
  EXPECT_EQ(parse({"--prompt-file", kText, "--gen-tokens", "0"}).gen_tokens, 0);
}

void expect_rejected(std::vector<std::string> args, const std::string& message) {
  try {
    parse(args);
    ADD_FAILURE() << "accepted; expected an error containing \"" << message << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(Options, RejectsBadInput) {
  expect_rejected({"--prompt-file", kText, "--ctx-start", "abc"}, "--ctx-start");
  expect_rejected({"--prompt-file", kText, "--ctx-start", "12x"}, "--ctx-start");
  expect_rejected({"--prompt-file", kText, "--ctx-start", "0"}, "--ctx-start");
  expect_rejected({"--prompt-file", kText, "--gen-tokens", "-1"}, "--gen-tokens");
  expect_rejected({"--prompt-file", kText, "--step-mul", "0.5"}, "--step-mul");
  expect_rejected({"--prompt-file", kText, "--step-mul", "nan"}, "NaN is not a value");  // passes a range check
  expect_rejected({"--prompt-file", kText, "--step-incr", "0"}, "--step-incr");
  expect_rejected({"--prompt-file", kText, "--threads", "0"}, "--threads");
  expect_rejected({"--prompt-file", kText, "--ctx-start", "200", "--ctx-max", "100"},
                  "--ctx-start (200) must be <= --ctx-max (100)");
  expect_rejected({"--prompt-file", kText, "--ctx-start", "50", "--ctx-max", "100", "-n", "10", "--ctx-alloc", "110"},
                  "--ctx-alloc (110) must be greater than ctx-max + gen-tokens (110)");
  expect_rejected({"--prompt-file", kText, "-m", "/nonexistent/model.gguf"},
                  "model file /nonexistent/model.gguf does not exist");
  expect_rejected({"--prompt-file", "/nonexistent/prompt.txt"}, "prompt file /nonexistent/prompt.txt does not exist");
  expect_rejected({}, "exactly one of --prompt-file or --chat-prompt-file");
  expect_rejected({"--prompt-file", kText, "--chat-prompt-file", kText}, "exactly one of");
  expect_rejected({"--fill-state", "--prompt-file", kText, "--chat-prompt-file", kText}, "exactly one of");
  expect_rejected({"--fill-state", "--prompt-file", "/nonexistent/p.txt"}, "prompt file /nonexistent/p.txt does not exist");
  expect_rejected({"--prompt-file", kText, "--backend", "metal"}, "--backend");
  expect_rejected({"--prompt-file", kText, "--cpu", "--cuda"}, "--cpu");
  expect_rejected({"--prompt-file", kText, "--bogus"}, "--bogus");
  expect_rejected({"--synthetic", "flash-q2"}, "--synthetic needs the CUDA backend");
  // The model name is checked before the backend, so a typo is reported first.
  expect_rejected({"--synthetic", "flash-q9"}, "unknown synthetic model 'flash-q9'");
  expect_rejected({"--prompt-file", kText, "--cpu", "--kernel-profile"}, "--kernel-profile times CUDA kernels; it needs --cuda");
  expect_rejected({"--prompt-file", kText, "--fill-state", "-n", "0"}, "--fill-state measures decode only");
  expect_rejected({"--prompt-file", "/tmp"}, "prompt file /tmp is not a regular file");
  expect_rejected({"--cuda", "--synthetic", "flash"},
                  "unknown synthetic model 'flash' (expected flash-q2, flash-q4 or pro-q2)");
  expect_rejected({"--prompt-file", kText, "--cuda", "--synthetic", "flash-q2"},
                  "--synthetic uses seeded random token ids as the prompt");
  expect_rejected({"-m", kModel, "--cuda", "--synthetic", "flash-q2"}, "do not give -m");
  expect_rejected({"--cuda", "--synthetic", "flash-q2", "--gpu-vram", "-1"}, "--gpu-vram");
  expect_rejected({"--cuda", "--synthetic", "flash-q2", "--ctx-start", "64", "--ctx-max", "32"},
                  "--ctx-start (64) must be <= --ctx-max (32)");
  expect_rejected({"--cuda", "--fill-state", "--synthetic-layers", "8"}, "--synthetic-layers needs --synthetic NAME");
  expect_rejected({"--cuda", "--synthetic", "flash-q2", "--synthetic-layers", "44"},
                  "synthetic flash-q2: 44 layers requested, the model has 1..43");
  expect_rejected({"--cuda", "--synthetic", "flash-q2", "--synthetic-layers", "0"}, "the model has 1..43");
  expect_rejected({"--cuda", "--synthetic", "flash-q2", "--synthetic-layers", "-3"}, "--synthetic-layers");
  // An unsigned seed neither wraps a sign nor clamps a value past 2^64 - 1 (CLI11's own conversion does both).
  expect_rejected({"--cuda", "--synthetic", "flash-q2", "--seed", "-1"},
                  "--seed: Failed parsing -1 as a whole number (digits only, at most 18446744073709551615)");
  expect_rejected({"--cuda", "--synthetic", "flash-q2", "--seed", "18446744073709551616"},
                  "--seed: Value 18446744073709551616 is larger than 18446744073709551615");
  EXPECT_EQ(parse_bench_options({"--cuda", "--synthetic", "flash-q2", "--seed", "18446744073709551615"}, kModel)->seed,
            UINT64_MAX);
  EXPECT_EQ(parse_bench_options({"--cuda", "--synthetic", "pro-q2", "--synthetic-layers", "61"}, kModel)
                ->synthetic_layers, 61u);
  const auto ok = parse_bench_options({"--cuda", "--synthetic", "pro-q2", "--gpu-vram", "40", "--seed", "9",
                                       "--kernel-profile"}, kModel);
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(*ok->synthetic, "pro-q2");
  EXPECT_EQ(ok->gpu_vram, std::vector<double>{40.0});  // the old single-number cap
  EXPECT_TRUE(ok->gpu_devices.empty());
  EXPECT_EQ(ok->seed, 9u);
  EXPECT_TRUE(ok->kernel_profile);
  EXPECT_FALSE(ok->fill_state);
  EXPECT_TRUE(parse_bench_options({"--cuda", "--synthetic", "flash-q2", "--fill-state"}, kModel)->fill_state);
  // --fill-state reads no prompt, so a model alone is enough.
  const auto fs = parse_bench_options({"-m", kModel, "--cpu", "--fill-state"}, kModel);
  ASSERT_TRUE(fs.has_value());
  EXPECT_FALSE(fs->prompt_file.has_value());
  EXPECT_FALSE(fs->chat_prompt_file.has_value());
}

// --gpu-devices (repeats allowed: ranks sharing a GPU) and --gpu-vram (one cap, or one per
// device; auto = no cap) for the expert-parallel synthetic backend.
TEST(Options, GpuDevicesAndPerDeviceVram) {
  const std::vector<std::string> q4 = {"--cuda", "--synthetic", "flash-q4"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = q4;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  BenchOptions o = parse(with({"--gpu-devices", "0,1"}));
  EXPECT_EQ(o.gpu_devices, (std::vector<int>{0, 1}));
  EXPECT_TRUE(o.gpu_vram.empty());
  o = parse(with({"--gpu-devices", "0,0", "--gpu-vram", "70,60.5"}));
  EXPECT_EQ(o.gpu_devices, (std::vector<int>{0, 0}));
  EXPECT_EQ(o.gpu_vram, (std::vector<double>{70.0, 60.5}));
  o = parse(with({"--gpu-devices", "3,1,2", "--gpu-vram", "100"}));  // one cap for every device
  EXPECT_EQ(o.gpu_devices, (std::vector<int>{3, 1, 2}));
  EXPECT_EQ(o.gpu_vram, std::vector<double>{100.0});
  EXPECT_TRUE(parse(with({"--gpu-vram", "auto"})).gpu_vram.empty());
  EXPECT_EQ(parse(with({"--gpu-devices", "1"})).gpu_devices, std::vector<int>{1});
  // A model file: the device list goes to Engine::open (which checks it there).
  EXPECT_EQ(parse({"--prompt-file", kText, "--cuda", "--gpu-devices", "0,1"}).gpu_devices, (std::vector<int>{0, 1}));

  expect_rejected(with({"--gpu-devices", ""}), "--gpu-devices: needs at least one device");
  expect_rejected(with({"--gpu-devices", "0,,1"}), "empty item");
  expect_rejected(with({"--gpu-devices", "0,x"}), "\"x\" is not a CUDA device ordinal");
  expect_rejected(with({"--gpu-devices", "-1"}), "not a CUDA device ordinal");
  expect_rejected(with({"--gpu-devices", "1024"}), "not a CUDA device ordinal (0..1023)");
  expect_rejected(with({"--gpu-vram", "40,abc"}), "\"abc\" is not a budget in GiB");
  expect_rejected(with({"--gpu-vram", "-5"}), "is not a budget in GiB");
  expect_rejected(with({"--gpu-devices", "0,1", "--gpu-vram", "1,2,3"}),
                  "--gpu-vram lists 3 caps but 2 devices are used (--gpu-devices)");
  expect_rejected(with({"--gpu-vram", "40,40"}), "--gpu-vram lists 2 caps but 1 device is used");
  expect_rejected({"--prompt-file", kText, "--gpu-devices", "0,1"}, "--gpu-devices needs the CUDA backend (--cuda)");
  expect_rejected({"--prompt-file", kText, "--cpu", "--gpu-devices", "0"}, "--gpu-devices needs the CUDA backend");
  expect_rejected(with({"--gpu-devices", "0,1", "--kernel-profile"}), "--kernel-profile times one device");
}

// Per-rank budgets: a device's free memory is shared evenly by the ranks listed on it, then
// capped (one cap for all, or one per rank; 0 = no cap).
TEST(SyntheticShards, RankBudgetsShareDevicesAndApplyCaps) {
  constexpr uint64_t G = uint64_t{1} << 30;
  const std::vector<int> devs{0, 0, 1};
  const std::vector<uint64_t> free{100 * G, 100 * G, 60 * G};
  EXPECT_EQ(rank_budgets(devs, free, {}), (std::vector<uint64_t>{50 * G, 50 * G, 60 * G}));
  EXPECT_EQ(rank_budgets(devs, free, {40}), (std::vector<uint64_t>{40 * G, 40 * G, 40 * G}));
  EXPECT_EQ(rank_budgets(devs, free, {0, 45, 10}), (std::vector<uint64_t>{50 * G, 45 * G, 10 * G}));
  EXPECT_EQ(rank_budgets({2}, {7 * G}, {0.5}), std::vector<uint64_t>{G / 2});
  EXPECT_THROW(rank_budgets(devs, {G}, {}), Error);
  try {
    rank_budgets(devs, free, {1, 2});
    ADD_FAILURE() << "accepted two caps for three devices";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--gpu-vram lists 2 caps but --gpu-devices lists 3 devices"),
              std::string::npos) << e.what();
  }
}

/// Device bytes of one tensor, worked out here from the shape and ggml block geometry:
/// vectors, hash tables and APE tables as 4-byte elements, matrices in blocks.
uint64_t tensor_bytes_by_hand(const model::TensorSpec& s, model::Recipe recipe) {
  uint64_t elems = 1;
  for (uint64_t d : s.shape) elems *= d;
  if (s.kind == model::TensorKind::Vector || s.kind == model::TensorKind::HashTable ||
      s.name.find("_ape.") != std::string::npos)
    return 4 * elems;
  const auto info = ggml_type_info(static_cast<uint32_t>(model::recipe_type(s, recipe)));
  return elems / info->block_elems * info->block_bytes;
}

// A rank's memory: every non-routed tensor, its experts' share of the routed stacks, and the
// whole model's KV and scratch; checked against a sum over the tensor list done here.
TEST(SyntheticShards, ShardMemoryCountsOnlyItsExperts) {
  for (const char* name : {"flash-q2", "flash-q4"}) {
    const synth::SyntheticSpec spec = synth::parse_synthetic(name);
    const model::Config& c = spec.config;
    const int64_t ctx = 32768 + 129;
    uint64_t dense = 0, routed_per_expert = 0;
    for (const model::TensorSpec& s : model::expected_tensors(c)) {
      const uint64_t b = tensor_bytes_by_hand(s, spec.recipe);
      if (s.kind == model::TensorKind::RoutedGateUp || s.kind == model::TensorKind::RoutedDown) {
        ASSERT_EQ(b % c.n_expert, 0u) << s.name;
        routed_per_expert += b / c.n_expert;
      } else {
        dense += b;
      }
    }
    const auto full = synth::plan_memory(c, [&](const model::TensorSpec& s) { return model::recipe_type(s, spec.recipe); }, ctx);
    ASSERT_EQ(full.weights, dense + c.n_expert * routed_per_expert) << name;
    for (const auto& [b, e] : std::vector<std::pair<uint32_t, uint32_t>>{{0, 128}, {128, 256}, {0, 1}, {17, 200}, {0, 256}}) {
      const synth::MemoryPlan p = shard_memory(spec, ctx, b, e);
      EXPECT_EQ(p.weights, dense + (e - b) * routed_per_expert) << name << " " << b << "-" << e;
      EXPECT_EQ(p.kv, model::KvState::estimate(c, ctx).total());
      EXPECT_EQ(p.scratch, full.scratch);
      EXPECT_EQ(p.ctx, ctx);
    }
    EXPECT_THROW(shard_memory(spec, ctx, 5, 5), Error);
    EXPECT_THROW(shard_memory(spec, ctx, 0, 257), Error);
  }
}

// plan_gpus' expert ranges over rank budgets, with each rank's plan equal to its shard memory
// plus the headroom; ranges in proportion to the room left after the replicated part
// (largest-remainder rounding, worked here); refusals name the device and the shortfall.
TEST(SyntheticShards, PlanSplitsExpertsByRoomAndRefusesWhatDoesNotFit) {
  constexpr uint64_t G = uint64_t{1} << 30, headroom = uint64_t{512} << 20;
  const synth::SyntheticSpec spec = synth::parse_synthetic("flash-q4");
  const int64_t ctx = 2048 + 16 + 1;
  const uint64_t per_expert = shard_memory(spec, ctx, 0, 2).weights - shard_memory(spec, ctx, 0, 1).weights;
  const uint64_t replicated = shard_memory(spec, ctx, 0, 1).total() - per_expert + headroom;

  SyntheticShardPlan p = plan_synthetic_shards(spec, ctx, {0, 1}, {139 * G, 139 * G});
  ASSERT_EQ(p.shards.size(), 2u);
  EXPECT_EQ(p.shards[0].expert_begin, 0u);
  EXPECT_EQ(p.shards[0].expert_end, 128u);
  EXPECT_EQ(p.shards[1].expert_begin, 128u);
  EXPECT_EQ(p.shards[1].expert_end, 256u);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(p.placement.devices[r].bytes, p.shards[r].memory.total() + headroom);
    EXPECT_EQ(p.shards[r].memory.total(), replicated - headroom + 128 * per_expert);
    EXPECT_EQ(p.shards[r].budget, 139 * G);
    EXPECT_EQ(p.shards[r].device, static_cast<int>(r));
  }
  const std::string text = p.describe();
  EXPECT_NE(text.find("GPU config: expert parallel over 2 devices, ctx 2065"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 1 cuda:1 experts 128-255 (128 of 256): weights "), std::string::npos) << text;

  // Uneven budgets on one shared device: rooms 100 - R and 90 - R.
  const std::vector<uint64_t> budgets{100 * G, 90 * G};
  p = plan_synthetic_shards(spec, ctx, {0, 0}, budgets);
  const double r0 = static_cast<double>(budgets[0] - replicated), r1 = static_cast<double>(budgets[1] - replicated);
  const double share0 = 256 * r0 / (r0 + r1), share1 = 256 * r1 / (r0 + r1);
  uint32_t n0 = static_cast<uint32_t>(share0), n1 = static_cast<uint32_t>(share1);
  if (n0 + n1 < 256) (share0 - n0 >= share1 - n1 ? n0 : n1) += 1;
  ASSERT_EQ(n0 + n1, 256u);
  EXPECT_EQ(p.shards[0].expert_end, n0);
  EXPECT_EQ(p.shards[1].expert_begin, n0);
  EXPECT_EQ(p.shards[0].device, 0);
  EXPECT_EQ(p.shards[1].device, 0);
  EXPECT_EQ(p.placement.devices[1].bytes, replicated + n1 * per_expert);

  // 153 GiB of weights do not fit two 70 GiB ranks: cuda:0 named with its shortfall.
  try {
    plan_synthetic_shards(spec, ctx, {0, 1}, {70 * G, 70 * G});
    ADD_FAILURE() << "flash-q4 accepted in 2 x 70 GiB";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("does not fit: cuda:0 needs"), std::string::npos) << m;
    EXPECT_NE(m.find("but its budget is 70.0 GiB (short by "), std::string::npos) << m;
  }
  EXPECT_THROW(plan_synthetic_shards(spec, ctx, {0, 1}, {139 * G, 0}), Error);
  EXPECT_THROW(plan_synthetic_shards(spec, ctx, {0, 1}, {139 * G}), Error);
}

// A random state of n tokens has the real shapes: it imports into a session, decodes to finite
// logits, and the decode-only sweep reports one row per frontier with its f32 state bytes.
TEST(FillState, RandomStateImportsAndTheDecodeOnlySweepReportsRows) {
  auto engine = Engine::open({.model_path = kModel, .backend = "cpu", .threads = 1});
  const model::Config& c = engine->config();
  const model::KvState st = random_state(c, 128, 77, 5);
  auto s = engine->backend().new_session(128);
  s->import_state(st);
  std::vector<float> l(c.n_vocab);
  const int32_t tok = 42;
  s->eval({&tok, 1}, 77, l, {});
  for (float v : l) ASSERT_TRUE(std::isfinite(v));
  EXPECT_THROW(random_state(c, 128, 128, 5), Error);
  EXPECT_THROW(random_state(c, 128, 0, 5), Error);

  SweepSettings set;
  set.ctx_alloc = 128;
  set.frontiers = {40, 80};
  set.gen_tokens = 2;
  std::vector<FrontierResult> rows;
  run_fill_state_sweep(c, engine->backend(), set, 5, [&](const FrontierResult& r) { rows.push_back(r); });
  ASSERT_EQ(rows.size(), 2u);
  for (const FrontierResult& r : rows) {
    EXPECT_EQ(r.prefill_tokens, 0);
    EXPECT_EQ(r.gen_tokens, 2);
    EXPECT_GT(r.gen_s, 0.0);
    uint64_t bytes = 0;  // raw rings + n/R compressed rows + n/4 indexer rows, f32
    const uint64_t raw_cap = std::min<uint64_t>(c.n_swa, 128);
    for (uint32_t il = 0; il < c.n_layer; ++il) {
      bytes += 4 * raw_cap * c.head_dim;
      const uint32_t R = c.compress_ratio(il);
      if (R) bytes += 4 * uint64_t(r.ctx_tokens / R) * c.head_dim;
      if (R == 4) bytes += 4 * uint64_t(r.ctx_tokens / 4) * c.indexer_head_dim;
    }
    EXPECT_EQ(r.kvcache_bytes, bytes);
  }
  set.gen_tokens = 0;
  EXPECT_THROW(run_fill_state_sweep(c, engine->backend(), set, 5, [](const FrontierResult&) {}), Error);
}

// The backend calls of a decode-only sweep, recorded by a wrapper around the CPU backend.
class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(Backend& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name(); }
  std::unique_ptr<BackendSession> new_session(int64_t ctx) override {
    calls.push_back("new");
    return std::make_unique<RecordingSession>(inner_.new_session(ctx), calls);
  }
  std::vector<std::string> calls;  // "new", "import", "eval@POS"

 private:
  class RecordingSession final : public BackendSession {
   public:
    RecordingSession(std::unique_ptr<BackendSession> s, std::vector<std::string>& calls)
        : s_(std::move(s)), calls_(calls) {}
    void eval(std::span<const int32_t> t, int64_t pos0, std::span<float> last, std::span<float> all) override {
      calls_.push_back("eval@" + std::to_string(pos0));
      s_->eval(t, pos0, last, all);
    }
    void reset() override { s_->reset(); }
    void export_state(model::KvState& out) const override { s_->export_state(out); }
    void import_state(const model::KvState& in) override {
      calls_.push_back("import");
      s_->import_state(in);
    }
    int64_t ctx() const override { return s_->ctx(); }

   private:
    std::unique_ptr<BackendSession> s_;
    std::vector<std::string>& calls_;
  };
  Backend& inner_;
};

// Per frontier: a fresh session, one untimed step at the frontier, then `repeat` timed runs of
// gen_tokens steps, each from the state imported again (so the warm-up step never shows in the
// positions the timed runs decode at).
TEST(FillState, EachFrontierTakesOneUntimedStepThenTimedRunsFromTheImportedState) {
  auto engine = Engine::open({.model_path = kModel, .backend = "cpu", .threads = 1});
  RecordingBackend rec(engine->backend());
  SweepSettings set;
  set.ctx_alloc = 128;
  set.frontiers = {40, 80};
  set.gen_tokens = 2;
  set.repeat = 2;
  run_fill_state_sweep(engine->config(), rec, set, 5, [](const FrontierResult&) {});
  std::vector<std::string> want;
  for (const int f : {40, 80}) {
    const std::string p0 = "eval@" + std::to_string(f), p1 = "eval@" + std::to_string(f + 1);
    for (const std::string& c : {std::string("new"), std::string("import"), p0, std::string("import"), p0, p1,
                                 std::string("import"), p0, p1})
      want.push_back(c);
  }
  EXPECT_EQ(rec.calls, want);
}

// ---- the binary ----

/// True when the default backend of this build on this machine is CUDA (a GPU is present).
bool have_gpu() {
  static const bool v =
      Engine::open({.model_path = kModel, .backend = "auto", .threads = 1})->backend().name() == "cuda";
  return v;
}

struct RunResult {
  int code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class Ds4BenchRun : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kModel)) << kModel << " (built by the ds4_models target)";
    dir_ = fs::temp_directory_path() /
           ("ds4_bench_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  RunResult run(const std::string& args) {
    const auto out = dir_ / "stdout", err = dir_ / "stderr";
    const std::string cmd = std::string(DS4_BENCH_EXE) + " " + args + " > " + out.string() +
                            " 2> " + err.string();
    const int status = std::system(cmd.c_str());
    RunResult r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }
  void expect_bad_input(const std::string& args, const std::string& message) {
    const RunResult r = run(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("ds4-bench: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(r.out, "") << args;
  }

  fs::path dir_;
};

std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::istringstream ls(line);
    std::string cell;
    while (std::getline(ls, cell, ',')) cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}

TEST_F(Ds4BenchRun, TinySweepWritesDs4CsvWithPositiveValues) {
  const auto csv_path = dir_ / "out.csv";
  const RunResult r = run("-m " + kModel + " --prompt-file " + kText +
                          " --cpu -t 1 --ctx-start 24 --ctx-max 72 --step-incr 24 --gen-tokens 3"
                          " --memcpy-mib 0 --csv " + csv_path.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");  // the CSV went to the file
  EXPECT_NE(r.err.find("weights"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("memcpy"), std::string::npos) << r.err;
  const auto rows = parse_csv(slurp(csv_path));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0], parse_csv(csv_header())[0]);
  ASSERT_EQ(rows[0].size(), 11u);

  // Independent snapshot sizes: the same prefixes through a Session of the same context.
  auto engine = Engine::open({.model_path = kModel, .backend = "cpu", .threads = 1});
  const auto prompt = engine->tokenizer().encode_plain(slurp(kText));
  const int64_t frontier[] = {24, 48, 72};
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& c = rows[i];
    ASSERT_EQ(c.size(), 11u) << i;
    EXPECT_EQ(std::stoll(c[0]), frontier[i - 1]);
    EXPECT_EQ(std::stoll(c[1]), 24);
    EXPECT_GT(std::stod(c[2]), 0.0);
    EXPECT_EQ(std::stoll(c[3]), 3);
    EXPECT_GT(std::stod(c[4]), 0.0);
    Session s(engine->config(), engine->backend(), 72 + 3 + 1);
    s.prefill(std::span(prompt).first(static_cast<size_t>(frontier[i - 1])));
    EXPECT_EQ(std::stoull(c[5]), s.save().size()) << "kvcache_bytes at " << frontier[i - 1];
    const double prefill_s = std::stod(c[6]), gen_s = std::stod(c[8]);
    EXPECT_GT(prefill_s, 0.0);
    EXPECT_GT(std::stod(c[7]), 0.0);
    EXPECT_GT(gen_s, 0.0);
    EXPECT_GT(std::stod(c[9]), 0.0);
    EXPECT_GT(std::stod(c[10]), 0.0);
    // tok/s columns agree with the seconds columns to their printed precision: tok/s has 2
    // decimals (±0.005), seconds 6 (±5e-7 s, which moves n/s by n * 5e-7 / s^2).
    auto bound = [](double n, double s) { return 0.0051 + n * 5.1e-7 / (s * s); };
    EXPECT_NEAR(std::stod(c[2]), 24 / prefill_s, bound(24, prefill_s));
    EXPECT_NEAR(std::stod(c[4]), 3 / gen_s, bound(3, gen_s));
  }
}

TEST_F(Ds4BenchRun, MultiplicativeStepsToStdoutWithRepeatChunksAndWarmWeights) {
  const RunResult r = run("-m " + kModel + " --prompt-file " + kText +
                          " -t 1 --ctx-start 8 --ctx-max 40 --step-mul 2 -n 1 --repeat 2 --memcpy-mib 0"
                          " --warm-weights --prefill-chunk 5");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = parse_csv(r.out);
  ASSERT_EQ(rows.size(), 5u) << r.out;
  const int64_t ctx[] = {8, 16, 32, 40}, interval[] = {8, 8, 16, 8};
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(std::stoll(rows[i][0]), ctx[i - 1]);
    EXPECT_EQ(std::stoll(rows[i][1]), interval[i - 1]);
    EXPECT_GT(std::stod(rows[i][2]), 0.0);
    EXPECT_GT(std::stod(rows[i][4]), 0.0);
  }
}

// --fill-state on a model file needs no prompt: one decode-only row per frontier, the
// frontier's random state imported (no prefill), its state bytes as kvcache_bytes.
TEST_F(Ds4BenchRun, FillStateRunsWithoutAPromptFile) {
  const RunResult r = run("-m " + kModel + " --cpu -t 1 --fill-state --ctx-start 16 --ctx-max 32 --step-mul 2 -n 2"
                          " --repeat 2 --memcpy-mib 0");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = parse_csv(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(std::stoll(rows[i][0]), i == 1 ? 16 : 32);
    EXPECT_EQ(std::stoll(rows[i][1]), 0);  // no prefill
    EXPECT_EQ(std::stoll(rows[i][3]), 2);
    EXPECT_GT(std::stod(rows[i][4]), 0.0);
  }
  EXPECT_EQ(r.err.find("prompt file"), std::string::npos) << r.err;
}

TEST_F(Ds4BenchRun, ChatPromptIsRenderedAndSliced) {
  const RunResult r = run("-m " + kModel + " --chat-prompt-file " + kText +
                          " -sys 'Be brief.' -t 1 --ctx-start 16 --ctx-max 32 --step-incr 16 -n 2 --memcpy-mib 0");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = parse_csv(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  EXPECT_EQ(std::stoll(rows[1][0]), 16);
  EXPECT_EQ(std::stoll(rows[2][0]), 32);
  EXPECT_GT(std::stod(rows[2][4]), 0.0);
}

TEST_F(Ds4BenchRun, BadInputExitsTwoWithAClearMessage) {
  const std::string base = " --prompt-file " + kText + " --memcpy-mib 0 ";
  expect_bad_input("-m /nonexistent/model.gguf" + base, "model file /nonexistent/model.gguf does not exist");
  expect_bad_input("-m " + kText + base + "--ctx-start 8 --ctx-max 8", "GGUF");  // not a model
  expect_bad_input("-m " + kModel + base + "--ctx-start 8x", "--ctx-start");
  expect_bad_input("--nope", "ds4-bench: The following argument was not expected: --nope\n"
                             "Run with --help for more information.");
  expect_bad_input("-m " + kModel + base + "--gen-tokens many", "--gen-tokens");
  expect_bad_input("-m " + kModel + base + "--ctx-start 64 --ctx-max 32",
                   "--ctx-start (64) must be <= --ctx-max (32)");
  // Without a GPU (or without nvcc) --cuda fails at open with "--cuda (--backend cuda): ...".
  if (!have_gpu()) expect_bad_input("-m " + kModel + base + "--cuda", "--cuda (--backend cuda): ");
  expect_bad_input("-m " + kModel + base + "--synthetic flash", "unknown synthetic model 'flash'");
  expect_bad_input("-m " + kModel + base + "--synthetic flash-q2", "--synthetic needs the CUDA backend");
  const auto short_prompt = dir_ / "short.txt";
  std::ofstream(short_prompt) << "Just a few words.";
  expect_bad_input("-m " + kModel + " --prompt-file " + short_prompt.string() +
                       " --ctx-start 8 --ctx-max 64 --memcpy-mib 0",
                   "need at least --ctx-max = 64");
  expect_bad_input("-m " + kModel + base + "--ctx-start 8 --ctx-max 8 --csv /nonexistent/dir/x.csv",
                   "cannot open for writing");
}

// The memory plan is printed before anything is allocated; pro-q2 under a 40 GiB cap does not
// fit, which is a clear exit-2 error (without a GPU: the "no CUDA device" error instead).
TEST_F(Ds4BenchRun, SyntheticPrintsThePlanOrFailsClearly) {
  const RunResult r = run("--cuda --synthetic pro-q2 --gpu-vram 40 --ctx-start 8 --ctx-max 8 -n 1");
  EXPECT_EQ(r.code, 2) << r.err;
  const bool no_device = r.err.find("no CUDA device") != std::string::npos ||
                         r.err.find("has no CUDA backend") != std::string::npos;
  const bool too_big = r.err.find("synthetic pro-q2 does not fit in GPU memory") != std::string::npos &&
                       r.err.find("the --gpu-vram cap is 40.00 GiB") != std::string::npos;
  EXPECT_TRUE(no_device || too_big) << r.err;
}

TEST_F(Ds4BenchRun, HelpExitsZero) {
  const RunResult r = run("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--ctx-start"), std::string::npos);
  EXPECT_NE(r.out.find("--step-mul"), std::string::npos);
}

}  // namespace
}  // namespace ds4::bench
