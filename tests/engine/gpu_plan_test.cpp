// GPU placement planner: flag parsing, byte counts checked against the tensor sizes a real
// GGUF reader reports and against KvState::estimate, and placements checked on hand-built
// footprints whose splits can be worked out by hand.
#include "engine/gpu_plan.h"

#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cstdio>

#include "common/error.h"
#include "gguf/reader.h"
#include "backend/synthetic/synthetic_model.h"
#include "model/kv_state.h"

namespace ds4 {
namespace {

using ::testing::HasSubstr;
constexpr uint64_t kGiB = uint64_t{1} << 30;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GpuPlanParse, DevicesList) {
  EXPECT_EQ(parse_gpu_devices("0"), (std::vector<int>{0}));
  EXPECT_EQ(parse_gpu_devices("0,1,3"), (std::vector<int>{0, 1, 3}));
  for (const char* bad : {"", "0,,1", ",0", "0,", "a", "-1", "1024", "1x", " 1"})
    EXPECT_THAT(error_of([&] { parse_gpu_devices(bad); }), HasSubstr("--gpu-devices")) << bad;
  EXPECT_THAT(error_of([] { parse_gpu_devices("0,1,0"); }), HasSubstr("device 0 is listed twice"));
  // ds4-bench --synthetic: ranks sharing one device.
  EXPECT_EQ(parse_gpu_devices("0,1,0", /*allow_repeats=*/true), (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(parse_gpu_devices("2,2", true), (std::vector<int>{2, 2}));
  EXPECT_THAT(error_of([] { parse_gpu_devices("0,,0", true); }), HasSubstr("empty item"));
}

TEST(GpuPlanParse, VramBudgets) {
  EXPECT_FALSE(parse_gpu_vram("auto").has_value());
  EXPECT_EQ(*parse_gpu_vram("70,64.5"), (std::vector<uint64_t>{70 * kGiB, 64 * kGiB + kGiB / 2}));
  EXPECT_EQ(*parse_gpu_vram("0"), (std::vector<uint64_t>{0}));
  for (const char* bad : {"", "x", "-1", "nan", "inf", "1e7", "70,", "Auto"})
    EXPECT_THAT(error_of([&] { parse_gpu_vram(bad); }), HasSubstr("--gpu-vram")) << bad;
}

// Matrix bytes must equal what the GGUF reader reports for the generated tiny q2 file (an
// independent computation from the file's own directory); vectors and APE tables count as the
// device stores them (f32), so the whole equals the synthetic memory plan's weights.
TEST(GpuPlanFootprint, MatchesGeneratedFileAndKvEstimate) {
  const auto reader =
      gguf::Reader::open(std::string(DS4_BINARY_DIR) + "/models/ds4-tiny-q2.gguf");
  const model::Config c = model::Config::from_gguf(reader);
  const auto type_of = [&](const model::TensorSpec& s) { return reader.tensor(s.name).type(); };
  const ModelFootprint fp = model_footprint(c, type_of, 1000);

  uint64_t kv = 0;
  for (const LayerFootprint& l : fp.layers) kv += l.kv_bytes;
  EXPECT_EQ(fp.embedding_bytes, reader.tensor("token_embd.weight").n_bytes);
  EXPECT_EQ(fp.total() - kv + fp.embedding_bytes, synth::plan_memory(c, type_of, 1000).weights);
  EXPECT_EQ(kv, model::KvState::estimate(c, 1000).total());
  EXPECT_EQ(fp.head_bytes, reader.tensor("output.weight").n_bytes +
                               reader.tensor("output_hc_fn.weight").n_bytes +
                               4 * (1 + c.n_hc + c.n_embd));  // scale, base, output_norm
  // One expert's bytes times the expert count equal the three routed tensors of a layer.
  const LayerFootprint& l3 = fp.layers[3];
  const uint64_t routed = reader.tensor("blk.3.ffn_gate_exps.weight").n_bytes +
                          reader.tensor("blk.3.ffn_up_exps.weight").n_bytes +
                          reader.tensor("blk.3.ffn_down_exps.weight").n_bytes;
  EXPECT_EQ(uint64_t{l3.n_expert} * l3.expert_bytes, routed);
  EXPECT_THAT(error_of([&] { model_footprint(c, type_of, 0); }), HasSubstr("at least 1 token"));
}

// Full-size Flash: the q2 recipe is ds4's ~81 GB file and q4 ~152 GiB (issue #8; product docs).
TEST(GpuPlanFootprint, FlashRecipesMatchPublishedSizes) {
  const model::Config c = model::Config::flash();
  for (auto [recipe, lo, hi] : {std::tuple{model::Recipe::q2, 75.0, 90.0},
                                std::tuple{model::Recipe::q4, 145.0, 160.0}}) {
    const auto type_of = [&](const model::TensorSpec& s) { return model::recipe_type(s, recipe); };
    const ModelFootprint fp = model_footprint(c, type_of, 1);
    const double gib = static_cast<double>(fp.total() + fp.embedding_bytes) / kGiB;
    std::printf("Flash %s: %.2f GiB of weights (embedding %.2f GiB)\n",
                std::string(model::recipe_name(recipe)).c_str(), gib,
                static_cast<double>(fp.embedding_bytes) / kGiB);
    EXPECT_GT(gib, lo) << model::recipe_name(recipe);
    EXPECT_LT(gib, hi) << model::recipe_name(recipe);
  }
}

/// n equal layers of `layer` bytes (4 experts of `expert` bytes each inside), head `head`.
ModelFootprint uniform(uint32_t n, uint64_t dense, uint64_t expert, uint64_t kv, uint64_t head) {
  ModelFootprint fp;
  fp.ctx = 4096;
  fp.head_bytes = head;
  fp.layers.assign(n, LayerFootprint{.dense_bytes = dense, .expert_bytes = expert, .n_expert = 4,
                                      .kv_bytes = kv});
  return fp;
}

TEST(GpuPlanLayers, SplitsInProportionToBudgets) {
  // 8 layers of 10 bytes (2 dense + 4 x 2 experts), head 4 -> 84 bytes.
  const ModelFootprint fp = uniform(8, 2, 2, 0, 4);
  GpuPlan p = plan_gpus(fp, {0, 1}, {100, 100}, GpuPlanMode::layers, 0);
  EXPECT_EQ(p.devices[0].layer_begin, 0u);
  EXPECT_EQ(p.devices[0].layer_end, 4u);
  EXPECT_EQ(p.devices[1].layer_begin, 4u);
  EXPECT_EQ(p.devices[1].layer_end, 8u);
  EXPECT_FALSE(p.devices[0].head);
  EXPECT_TRUE(p.devices[1].head);
  EXPECT_EQ(p.devices[0].bytes, 40u);
  EXPECT_EQ(p.devices[1].bytes, 44u);

  // Budgets 3:1 (room after 5 bytes scratch: 300 and 100): 84 * 3/4 = 63 -> 6 layers then 2.
  p = plan_gpus(fp, {2, 5}, {305, 105}, GpuPlanMode::layers, 5);
  EXPECT_EQ(p.devices[0].layer_end, 6u);
  EXPECT_EQ(p.devices[1].layer_begin, 6u);
  EXPECT_EQ(p.devices[0].bytes, 65u);
  EXPECT_EQ(p.devices[1].bytes, 29u);
  EXPECT_EQ(p.devices[1].device, 5);

  // A zero budget leaves its device out; the rest still must fit.
  p = plan_gpus(fp, {0, 1}, {0, 90}, GpuPlanMode::layers, 0);
  EXPECT_FALSE(p.devices[0].used());
  EXPECT_EQ(p.devices[1].layer_end, 8u);
  EXPECT_EQ(p.describe(),
            "GPU config: layer split over 1 device, ctx 4096\n"
            "  cuda:0   unused (budget 0.0 GiB)\n"
            "  cuda:1   layers 0-7, experts 0-3, output head: 0.0 GiB of 0.0 GiB\n");
}

TEST(GpuPlanLayers, RefusesWhatDoesNotFit) {
  const ModelFootprint fp = uniform(8, 2, 2, 0, 4);
  EXPECT_THAT(error_of([&] { plan_gpus(fp, {0, 1}, {40, 40}, GpuPlanMode::layers, 0); }),
              HasSubstr("the model does not fit: cuda:1 needs"));
  EXPECT_THAT(error_of([&] { plan_gpus(fp, {0, 1}, {0, 0}, GpuPlanMode::layers, 0); }),
              HasSubstr("every --gpu-vram budget is 0"));
  EXPECT_THAT(error_of([&] { plan_gpus(fp, {0, 1}, {100}, GpuPlanMode::layers, 0); }),
              HasSubstr("lists 1 budgets but 2 devices"));
  EXPECT_THAT(error_of([&] { plan_gpus(fp, {}, {}, GpuPlanMode::layers, 0); }),
              HasSubstr("no CUDA device"));
}

TEST(GpuPlanExpertParallel, ReplicatesDenseSplitsExperts) {
  // 2 layers: dense 4, 4 experts of 5 bytes, kv 3; head 7; scratch 1.
  const ModelFootprint fp = uniform(2, 4, 5, 3, 7);
  GpuPlan p = plan_gpus(fp, {0, 1}, {1000, 1000}, GpuPlanMode::expert_parallel, 1);
  // Replicated per device: 1 + 2 * (4 + 3) = 15; device 0 also the head (22).
  // Rooms 978 : 985 -> 4 experts split 2 : 2; one expert id = 2 layers x 5 = 10 bytes.
  EXPECT_EQ(p.devices[0].expert_begin, 0u);
  EXPECT_EQ(p.devices[0].expert_end, 2u);
  EXPECT_EQ(p.devices[1].expert_begin, 2u);
  EXPECT_EQ(p.devices[1].expert_end, 4u);
  EXPECT_EQ(p.devices[0].bytes, 22u + 20u);
  EXPECT_EQ(p.devices[1].bytes, 15u + 20u);
  EXPECT_TRUE(p.devices[0].head);
  EXPECT_EQ(p.devices[1].layer_end, 2u);

  // Room 3:1 after the replicated part -> experts 3 and 1.
  p = plan_gpus(fp, {0, 1}, {22 + 60, 15 + 20}, GpuPlanMode::expert_parallel, 1);
  EXPECT_EQ(p.devices[0].expert_end, 3u);
  EXPECT_EQ(p.devices[1].expert_begin, 3u);
  EXPECT_EQ(p.devices[1].bytes, 25u);
  EXPECT_THAT(p.describe(), HasSubstr("GPU config: expert parallel over 2 devices"));

  EXPECT_THAT(error_of([&] { plan_gpus(fp, {0, 1}, {30, 30}, GpuPlanMode::expert_parallel, 1); }),
              HasSubstr("does not fit: cuda:0"));
  // 40 bytes on a budget of 30 (2 experts): the shortfall is named (0.0 GiB at this scale).
  EXPECT_THAT(error_of([&] { plan_gpus(fp, {0, 1}, {30, 30}, GpuPlanMode::expert_parallel, 1); }),
              HasSubstr("but its budget is 0.0 GiB (short by 0.0 GiB)"));
  EXPECT_THAT(error_of([&] { plan_gpus(fp, {0, 1}, {uint64_t{3} << 30, uint64_t{4} << 30},
                                       GpuPlanMode::expert_parallel, uint64_t{5} << 30); }),
              HasSubstr("cuda:0 needs 5.0 GiB (replicated weights and KV 5.0 GiB + experts 0-1) but its "
                        "budget is 3.0 GiB (short by 2.0 GiB)"));
}

}  // namespace
}  // namespace ds4
