#include "engine/gpu_plan.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "common/error.h"
#include "backend/synthetic/synthetic_model.h"
#include "model/kv_state.h"

namespace ds4 {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::vector<std::string_view> split_commas(std::string_view text, std::string_view flag) {
  std::vector<std::string_view> items;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view item = text.substr(start, comma == std::string_view::npos ? comma : comma - start);
    if (item.empty()) fail("{} \"{}\": empty item (expected a comma-separated list)", flag, text);
    items.push_back(item);
    if (comma == std::string_view::npos) return items;
    start = comma + 1;
  }
}

std::string gib(uint64_t bytes) { return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / kGiB); }

}  // namespace

std::vector<int> parse_gpu_devices(std::string_view text, bool allow_repeats) {
  std::vector<int> out;
  for (std::string_view item : split_commas(text, "--gpu-devices")) {
    int v = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc{} || end != item.data() + item.size() || v < 0 || v > 1023)
      fail("--gpu-devices \"{}\": \"{}\" is not a CUDA device ordinal (0..1023)", text, item);
    if (!allow_repeats && std::find(out.begin(), out.end(), v) != out.end())
      fail("--gpu-devices \"{}\": device {} is listed twice", text, v);
    out.push_back(v);
  }
  return out;
}

std::optional<std::vector<uint64_t>> parse_gpu_vram(std::string_view text) {
  if (text == "auto") return std::nullopt;
  std::vector<uint64_t> out;
  for (std::string_view item : split_commas(text, "--gpu-vram")) {
    double v = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc{} || end != item.data() + item.size() || !std::isfinite(v) || v < 0 ||
        v > 1e6)
      fail("--gpu-vram \"{}\": \"{}\" is not a budget in GiB (a number from 0 to 1000000, or "
           "\"auto\")", text, item);
    out.push_back(static_cast<uint64_t>(v * kGiB));
  }
  return out;
}

uint64_t ModelFootprint::total() const {
  uint64_t t = head_bytes;
  for (const LayerFootprint& l : layers) t += l.total();
  return t;
}

ModelFootprint model_footprint(const model::Config& config, const TensorTypeOf& type_of,
                               int64_t ctx) {
  if (ctx < 1) fail("context size {} must be at least 1 token", ctx);
  ModelFootprint fp;
  fp.ctx = ctx;
  fp.layers.resize(config.n_layer);
  for (const model::TensorSpec& spec : model::expected_tensors(config)) {
    const uint64_t bytes = synth::device_tensor_bytes(spec, type_of(spec));
    if (spec.layer < 0) {
      (spec.kind == model::TensorKind::TokenEmbedding ? fp.embedding_bytes : fp.head_bytes) += bytes;
      continue;
    }
    LayerFootprint& l = fp.layers[static_cast<size_t>(spec.layer)];
    if (spec.kind == model::TensorKind::RoutedGateUp || spec.kind == model::TensorKind::RoutedDown) {
      l.n_expert = config.n_expert;
      l.expert_bytes += bytes / config.n_expert;
      continue;
    }
    l.dense_bytes += bytes;
  }
  for (uint32_t il = 0; il < config.n_layer; ++il)
    fp.layers[il].kv_bytes = model::KvState::estimate_layer(config, il, ctx).total();
  return fp;
}

GpuPlan plan_gpus(const ModelFootprint& fp, const std::vector<int>& devices,
                  const std::vector<uint64_t>& budgets, GpuPlanMode mode, uint64_t scratch_bytes) {
  if (devices.empty()) fail("no CUDA device to place the model on");
  if (budgets.size() != devices.size())
    fail("--gpu-vram lists {} budgets but {} devices are used (--gpu-devices); give one budget "
         "per device", budgets.size(), devices.size());
  if (fp.layers.empty()) fail("the model has no layers to place");
  GpuPlan plan;
  plan.mode = mode;
  plan.ctx = fp.ctx;
  std::vector<size_t> active;  // indices into devices with a non-zero budget
  for (size_t i = 0; i < devices.size(); ++i) {
    plan.devices.push_back(DevicePlacement{.device = devices[i], .budget = budgets[i]});
    if (budgets[i] > 0) active.push_back(i);
  }
  if (active.empty()) fail("every --gpu-vram budget is 0: no device may hold the model");

  const auto does_not_fit = [&](const DevicePlacement& d, std::string_view what) {
    fail("the model does not fit: cuda:{} needs {} ({}) but its budget is {} (short by {}); total "
         "need is {} for ctx {} (raise --gpu-vram, add devices with --gpu-devices, or lower --ctx)",
         d.device, gib(d.bytes), what, gib(d.budget), gib(d.bytes - d.budget),
         gib(fp.total() + scratch_bytes), fp.ctx);
  };
  const uint32_t n_layer = static_cast<uint32_t>(fp.layers.size());

  if (mode == GpuPlanMode::layers) {
    const auto room = [&](size_t i) {
      return budgets[i] > scratch_bytes ? budgets[i] - scratch_bytes : uint64_t{0};
    };
    uint64_t room_total = 0;
    for (size_t i : active) room_total += room(i);
    const uint64_t need = fp.total();
    // Cumulative byte targets in proportion to each device's room: a device stops taking layers
    // once the next one would carry it past its share (or its budget), as long as others remain.
    size_t a = 0;
    double target = static_cast<double>(need) * static_cast<double>(room(active[0])) /
                    std::max<uint64_t>(room_total, 1);
    uint64_t placed = 0;
    for (uint32_t il = 0; il < n_layer; ++il) {
      const uint64_t cost = fp.layers[il].total() + (il + 1 == n_layer ? fp.head_bytes : 0);
      DevicePlacement* d = &plan.devices[active[a]];
      const bool past_share = static_cast<double>(placed + cost / 2) > target;
      const bool over_budget = d->bytes + cost + scratch_bytes > d->budget;
      if (d->used() && a + 1 < active.size() && (past_share || over_budget)) {
        ++a;
        target += static_cast<double>(need) * static_cast<double>(room(active[a])) /
                  std::max<uint64_t>(room_total, 1);
        d = &plan.devices[active[a]];
      }
      if (!d->used()) d->layer_begin = d->layer_end = il;
      d->layer_end = il + 1;
      d->bytes += cost;
      placed += cost;
    }
    plan.devices[active[a]].head = true;
    for (size_t i : active) {
      DevicePlacement& d = plan.devices[i];
      if (!d.used()) continue;
      d.bytes += scratch_bytes;
      d.expert_end = fp.layers[0].n_expert;
      if (d.bytes > d.budget)
        does_not_fit(d, fmt::format("layers {}-{}{}", d.layer_begin, d.layer_end - 1,
                                    d.head ? " + output head" : ""));
    }
    return plan;
  }

  // Expert parallelism: the replicated part is the same on every device.
  const uint64_t n = active.size();
  uint64_t replicated = scratch_bytes;
  uint64_t per_expert = 0;  // one expert id across every layer
  for (const LayerFootprint& l : fp.layers) {
    replicated += l.dense_bytes + l.kv_bytes;
    per_expert += l.expert_bytes;
  }
  const uint32_t n_expert = fp.layers[0].n_expert;
  std::vector<uint64_t> fixed(active.size(), replicated);
  fixed[0] += fp.head_bytes;
  // Experts in proportion to the room left on each device (largest remainder rounding).
  std::vector<double> room(active.size());
  double room_total = 0;
  for (size_t k = 0; k < active.size(); ++k) {
    const uint64_t b = budgets[active[k]];
    room[k] = b > fixed[k] ? static_cast<double>(b - fixed[k]) : 0.0;
    room_total += room[k];
  }
  std::vector<uint32_t> count(active.size(), 0);
  uint32_t given = 0;
  std::vector<std::pair<double, size_t>> remainder;
  for (size_t k = 0; k < active.size(); ++k) {
    const double share = room_total > 0 ? n_expert * room[k] / room_total : double(n_expert) / n;
    count[k] = static_cast<uint32_t>(std::floor(share));
    given += count[k];
    remainder.emplace_back(share - count[k], k);
  }
  std::stable_sort(remainder.begin(), remainder.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  for (size_t r = 0; given < n_expert; ++r, ++given) ++count[remainder[r % remainder.size()].second];
  uint32_t next_expert = 0;
  for (size_t k = 0; k < active.size(); ++k) {
    DevicePlacement& d = plan.devices[active[k]];
    d.layer_begin = 0;
    d.layer_end = n_layer;
    d.expert_begin = next_expert;
    d.expert_end = next_expert += count[k];
    d.head = k == 0;
    d.bytes = fixed[k] + uint64_t{count[k]} * per_expert;
  }
  for (size_t k = 0; k < active.size(); ++k) {
    const DevicePlacement& d = plan.devices[active[k]];
    if (d.bytes > d.budget)
      does_not_fit(d, fmt::format("replicated weights and KV {} + experts {}-{}", gib(fixed[k]),
                                  d.expert_begin, d.expert_end - 1));
  }
  return plan;
}

std::string GpuPlan::describe() const {
  size_t used = 0;
  for (const DevicePlacement& d : devices) used += d.used();
  std::string s = fmt::format("GPU config: {} over {} device{}, ctx {}\n",
                              mode == GpuPlanMode::layers ? "layer split" : "expert parallel",
                              used, used == 1 ? "" : "s", ctx);
  for (const DevicePlacement& d : devices) {
    if (!d.used()) {
      s += fmt::format("  cuda:{:<3} unused (budget {})\n", d.device, gib(d.budget));
      continue;
    }
    s += fmt::format("  cuda:{:<3} layers {}-{}, experts {}-{}{}: {} of {}\n", d.device,
                     d.layer_begin, d.layer_end - 1, d.expert_begin, d.expert_end - 1,
                     d.head ? ", output head" : "", gib(d.bytes), gib(d.budget));
  }
  return s;
}

}  // namespace ds4
