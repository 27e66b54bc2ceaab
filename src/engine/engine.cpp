#include "engine/engine.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "backend/cpu/cpu_backend.h"
#include "engine/gpu_plan.h"
#include "engine/progress.h"
#ifdef DS4_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/expert_parallel.h"
#endif
#include "common/error.h"
#include "model/layout.h"

namespace ds4 {

std::unique_ptr<tok::Tokenizer> tokenizer_from_gguf(const gguf::Reader& r) {
  tok::Vocab v;
  for (auto s : r.get_string_array("tokenizer.ggml.tokens")) v.tokens.emplace_back(s);
  for (auto s : r.get_string_array("tokenizer.ggml.merges")) v.merges.emplace_back(s);
  if (r.has("tokenizer.ggml.token_type"))
    for (int64_t t : r.get_int_array("tokenizer.ggml.token_type"))
      v.token_types.push_back(static_cast<int32_t>(t));
  try {
    return std::make_unique<tok::Tokenizer>(std::move(v));
  } catch (const Error& e) {
    fail("{}: bad vocabulary: {}", r.name(), e.what());
  }
}

std::unique_ptr<tok::Tokenizer> Engine::open_tokenizer(const std::string& path) {
  return tokenizer_from_gguf(gguf::Reader::open(path));
}

#ifdef DS4_HAVE_CUDA
namespace {

/// The single-device CUDA backend, with a progress bar over the layers while the weights upload
/// (drawn only on a terminal).
std::unique_ptr<Backend> open_one_gpu(const Engine& e, int device) {
  ProgressBar bar("upload to GPU (layers)", e.config().n_layer);
  auto b = cuda::make_cuda_backend(e.config(), e.weights(),
                                   {.device = device, .progress = [&](uint64_t done, uint64_t) { bar.update(done); }});
  bar.finish();
  return b;
}

/// The CUDA backend for `devices`: one device without a plan when nothing asks for one; else
/// the plan (budgets given or each device's free memory less 1 GiB), printed, then one device
/// or expert parallelism over the devices the plan uses.
std::unique_ptr<Backend> open_cuda(const Engine& e, const EngineOptions& o, const std::vector<int>& devices,
                                   const std::optional<std::vector<uint64_t>>& budgets) {
  if (devices.size() == 1 && o.gpu_vram.empty()) return open_one_gpu(e, devices[0]);
  std::vector<uint64_t> room;
  if (budgets) {
    room = *budgets;
  } else {
    constexpr uint64_t kHeadroom = uint64_t{1} << 30;  // CUDA context, graphs, allocator slack
    for (int d : devices) {
      const uint64_t free_b = cuda::device_memory(d).first;
      room.push_back(free_b > kHeadroom ? free_b - kHeadroom : 0);
    }
  }
  const auto type_of = [&](const model::TensorSpec& s) {
    const gguf::TensorInfo* t = e.reader().find_tensor(s.name);
    return t ? t->type() : GgmlType::F32;  // an absent optional tensor counts as f32
  };
  const ModelFootprint fp = model_footprint(e.config(), type_of, std::max<int64_t>(o.plan_ctx, 1));
  const uint64_t scratch = (uint64_t{256} << 20) + cuda::prefill_scratch_bytes(e.config());  // + prefill chunks
  const GpuPlan plan = plan_gpus(fp, devices, room,
                                 devices.size() > 1 ? GpuPlanMode::expert_parallel : GpuPlanMode::layers, scratch);
  std::fputs(plan.describe().c_str(), stderr);
  std::vector<int> used;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  for (const DevicePlacement& d : plan.devices) {
    if (!d.used()) continue;
    used.push_back(d.device);
    ranges.emplace_back(d.expert_begin, d.expert_end);
  }
  if (used.size() == 1) return open_one_gpu(e, used[0]);
  return cuda::make_expert_parallel_backend(e.config(), e.weights(), used, ranges);
}

}  // namespace
#endif

std::unique_ptr<Engine> Engine::open(const EngineOptions& o) {
  std::unique_ptr<Engine> e(new Engine(gguf::Reader::open(o.model_path)));
  e->config_ = model::Config::from_gguf(e->reader_);
  model::validate_layout(e->config_, e->reader_);
  e->tokenizer_ = tokenizer_from_gguf(e->reader_);
  if (e->tokenizer_->n_vocab() != static_cast<int32_t>(e->config_.n_vocab))
    fail("{}: the vocabulary has {} tokens but deepseek4.vocab_size is {}", o.model_path,
         e->tokenizer_->n_vocab(), e->config_.n_vocab);
  e->weights_ = model::bind_weights(e->config_, e->reader_);
  if (o.backend != "auto" && o.backend != "cpu" && o.backend != "cuda")
    fail("unknown backend '{}' (expected auto, cpu or cuda)", o.backend);
  const std::vector<int> devices =
      o.gpu_devices.empty() ? std::vector<int>{0} : parse_gpu_devices(o.gpu_devices);
  if (o.cuda_tensor_parallel && devices.size() < 2)
    fail("--cuda-tensor-parallel needs --gpu-devices with at least two devices");
  const auto budgets = o.gpu_vram.empty() ? std::nullopt : parse_gpu_vram(o.gpu_vram);
  const bool no_gpu = budgets && std::all_of(budgets->begin(), budgets->end(), [](uint64_t b) { return b == 0; });
  if (no_gpu && o.backend == "cuda") fail("--gpu-vram 0 leaves no GPU memory for --cuda");
  // Devices other than the default one asked for: an error when none can be used, not a
  // silent CPU run.
  const bool asks_gpus = !o.gpu_devices.empty() && o.gpu_devices != "0" && o.backend != "cpu" && !no_gpu;
#ifdef DS4_HAVE_CUDA
  // --cuda requires a device (make_cuda_backend says why not); auto takes one when present.
  if (!no_gpu && (o.backend == "cuda" || (o.backend == "auto" && cuda::device_count() > 0))) {
    e->backend_ = open_cuda(*e, o, devices, budgets);
    return e;
  }
  if (asks_gpus)
    fail("--gpu-devices {}: no CUDA device is available (no GPU or no working NVIDIA driver); "
         "drop --gpu-devices or use --cpu", o.gpu_devices);
#else
  if (asks_gpus)
    fail("--gpu-devices: this build has no CUDA backend (configured without CUDA: nvcc not found or "
         "-DDS4_CUDA=OFF)");
  if (o.backend == "cuda")
    fail("--cuda (--backend cuda): this build has no CUDA backend (configured without CUDA: nvcc not found or -DDS4_CUDA=OFF); "
         "use --cpu");
#endif
  // --gpu-devices 0 or a GPU memory budget without a usable GPU: the CPU runs, and says so.
  if (o.backend == "auto" && !no_gpu && (!o.gpu_devices.empty() || !o.gpu_vram.empty()))
    std::fprintf(stderr, "note: %s; %s ignored, running on the CPU\n",
#ifdef DS4_HAVE_CUDA
                 "no CUDA device is available",
#else
                 "this build has no CUDA backend",
#endif
                 !o.gpu_devices.empty() ? "--gpu-devices" : "--gpu-vram");
  e->backend_ = cpu::make_cpu_backend(e->config_, e->weights_, o.threads);
  return e;
}

}  // namespace ds4
