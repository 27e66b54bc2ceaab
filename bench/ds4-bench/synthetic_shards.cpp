#include "synthetic_shards.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"

namespace ds4::bench {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

bool is_routed(const model::TensorSpec& s) {
  return s.kind == model::TensorKind::RoutedGateUp || s.kind == model::TensorKind::RoutedDown;
}

}  // namespace

std::vector<uint64_t> rank_budgets(const std::vector<int>& devices, const std::vector<uint64_t>& free_bytes,
                                   const std::vector<double>& caps_gib) {
  if (free_bytes.size() != devices.size())
    fail("rank_budgets: {} free-memory values for {} devices", free_bytes.size(), devices.size());
  if (caps_gib.size() > 1 && caps_gib.size() != devices.size())
    fail("--gpu-vram lists {} caps but --gpu-devices lists {} devices; give one cap, or one per device",
         caps_gib.size(), devices.size());
  std::vector<uint64_t> out;
  for (size_t i = 0; i < devices.size(); ++i) {
    const auto sharing = static_cast<uint64_t>(std::count(devices.begin(), devices.end(), devices[i]));
    uint64_t b = free_bytes[i] / sharing;
    const double cap = caps_gib.empty() ? 0.0 : caps_gib.size() == 1 ? caps_gib[0] : caps_gib[i];
    if (cap > 0) b = std::min(b, static_cast<uint64_t>(cap * kGiB));
    out.push_back(b);
  }
  return out;
}

synth::MemoryPlan shard_memory(const synth::SyntheticSpec& spec, int64_t ctx, uint32_t expert_begin,
                               uint32_t expert_end) {
  const model::Config& c = spec.config;
  if (expert_begin >= expert_end || expert_end > c.n_expert)
    fail("expert range [{}, {}) is not within the model's {} experts", expert_begin, expert_end, c.n_expert);
  const auto type_of = [&](const model::TensorSpec& s) { return model::recipe_type(s, spec.recipe); };
  synth::MemoryPlan p = synth::plan_memory(c, type_of, ctx);
  // Routed stacks are expert-major: each expert owns 1/n_expert of the tensor's bytes.
  for (const model::TensorSpec& s : model::expected_tensors(c)) {
    if (!is_routed(s)) continue;
    const uint64_t per_expert = synth::device_tensor_bytes(s, type_of(s)) / c.n_expert;
    p.weights -= per_expert * (c.n_expert - (expert_end - expert_begin));
  }
  return p;
}

SyntheticShardPlan plan_synthetic_shards(const synth::SyntheticSpec& spec, int64_t ctx,
                                         const std::vector<int>& devices, const std::vector<uint64_t>& budgets,
                                         uint64_t headroom) {
  const auto type_of = [&](const model::TensorSpec& s) { return model::recipe_type(s, spec.recipe); };
  ModelFootprint fp = model_footprint(spec.config, type_of, ctx);
  // plan_gpus places the head on the first device only and the embedding nowhere; every rank of
  // the synthetic backend generates both, so they are part of the replicated bytes here.
  fp.layers.at(0).dense_bytes += fp.embedding_bytes + fp.head_bytes;
  fp.embedding_bytes = fp.head_bytes = 0;
  const uint64_t scratch = synth::plan_memory(spec.config, type_of, ctx).scratch;
  for (uint64_t b : budgets)
    if (b == 0) fail("a GPU budget of 0 bytes leaves a rank no memory (is the device full?)");
  SyntheticShardPlan plan;
  plan.name = spec.name;
  plan.n_expert = spec.config.n_expert;
  plan.placement = plan_gpus(fp, devices, budgets, GpuPlanMode::expert_parallel, scratch + headroom);
  for (const DevicePlacement& d : plan.placement.devices)
    plan.shards.push_back(SyntheticShard{.device = d.device, .expert_begin = d.expert_begin,
                                         .expert_end = d.expert_end, .budget = d.budget,
                                         .memory = shard_memory(spec, ctx, d.expert_begin, d.expert_end)});
  return plan;
}

std::string SyntheticShardPlan::describe() const {
  std::string s = placement.describe();
  for (size_t r = 0; r < shards.size(); ++r) {
    const SyntheticShard& k = shards[r];
    s += fmt::format("  rank {} cuda:{} experts {}-{} ({} of {}): {} (budget {:.2f} GiB)\n", r, k.device,
                     k.expert_begin, k.expert_end - 1, k.expert_end - k.expert_begin, n_expert,
                     k.memory.describe(), k.budget / kGiB);
  }
  return s;
}

}  // namespace ds4::bench
