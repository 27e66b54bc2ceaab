// Placement of the model over one or more GPUs from per-device memory budgets (ds4's
// --gpu-devices / --gpu-vram / --cuda-tensor-parallel, product-surface.md "Runtime"): how many
// bytes each layer needs (weights from the tensor layout of spec §2.2, KV state of §4.1), and
// which device holds which layers (pipeline split) or which expert range (expert
// parallelism). Pure host arithmetic, so every rule is testable without a GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/ggml_type.h"
#include "model/config.h"
#include "model/layout.h"

namespace ds4 {

/// Parses --gpu-devices: comma-separated CUDA device ordinals ("0", "0,1,3"; with
/// `allow_repeats` also "0,0": ranks sharing one device, as ds4-bench allows for testing).
/// Throws ds4::Error for an empty list or item, a non-number, a negative or > 1023 ordinal, or
/// (unless allow_repeats) a device listed twice.
std::vector<int> parse_gpu_devices(std::string_view text, bool allow_repeats = false);

/// Parses --gpu-vram: "auto" (std::nullopt: use what each device reports free) or
/// comma-separated budgets in GiB ("70", "70,64.5"); a budget of 0 leaves that device unused.
/// Returns bytes. Throws ds4::Error for an empty item, a non-number, a negative, NaN or
/// > 1,000,000 GiB budget.
std::optional<std::vector<uint64_t>> parse_gpu_vram(std::string_view text);

/// Device bytes one layer needs (spec §2.2 tensors of block il, §4.1 state of block il).
struct LayerFootprint {
  uint64_t dense_bytes = 0;   ///< every weight of the layer except the routed experts
  uint64_t expert_bytes = 0;  ///< one routed expert: its rows of gate, up and down
  uint32_t n_expert = 0;      ///< routed experts in the layer
  uint64_t kv_bytes = 0;      ///< KV/compressor/indexer state for the planned ctx
  uint64_t total() const { return dense_bytes + uint64_t{n_expert} * expert_bytes + kv_bytes; }
};

/// Device bytes of the whole model for one session of `ctx` tokens.
struct ModelFootprint {
  std::vector<LayerFootprint> layers;
  uint64_t head_bytes = 0;       ///< output_hc_{fn,scale,base}, output_norm, output.weight
  uint64_t embedding_bytes = 0;  ///< token_embd: the CUDA backend keeps it in host memory
                                 ///< (rows are looked up, not multiplied), so it is not placed
  int64_t ctx = 0;
  uint64_t total() const;        ///< head + every layer (not the embedding)
};

/// The ggml type a tensor has (the loaded file's, or a recipe's for a synthetic model).
using TensorTypeOf = std::function<GgmlType(const model::TensorSpec&)>;

/// Counts device bytes per layer (synth::device_tensor_bytes of model::expected_tensors(config)
/// with each tensor's type: vectors and APE tables as f32, as the CUDA backend stores them), plus
/// model::KvState::estimate_layer for ctx. Optional tensors are counted. Throws ds4::Error for
/// an invalid config or ctx < 1.
ModelFootprint model_footprint(const model::Config& config, const TensorTypeOf& type_of,
                               int64_t ctx);

/// How the model is spread.
enum class GpuPlanMode {
  layers,           ///< pipeline: each device holds a contiguous range of whole layers
  expert_parallel,  ///< every device runs every layer with all non-routed weights and the whole
                    ///< KV; routed experts split into contiguous id ranges (what
                    ///< cuda::make_expert_parallel_backend runs)
};

/// What one device holds.
struct DevicePlacement {
  int device = 0;                  ///< CUDA ordinal
  uint64_t budget = 0;             ///< bytes it may use
  uint64_t bytes = 0;              ///< bytes placed on it (weights + KV + scratch)
  uint32_t layer_begin = 0, layer_end = 0;    ///< [begin, end) layers it runs
  uint32_t expert_begin = 0, expert_end = 0;  ///< [begin, end) routed experts it holds
  bool head = false;               ///< holds the output head
  bool used() const { return layer_end > layer_begin; }
};

/// A placement that fits every budget.
struct GpuPlan {
  GpuPlanMode mode = GpuPlanMode::layers;
  int64_t ctx = 0;
  std::vector<DevicePlacement> devices;  ///< in --gpu-devices order (unused ones included)
  /// "GPU config: ..." followed by one line per device (GiB with one decimal).
  std::string describe() const;
};

/// Places `fp` on `devices` with `budgets` (bytes, same length; 0 = leave the device unused),
/// reserving `scratch_bytes` on every used device for activations and workspaces.
/// layers mode: contiguous layer ranges sized in proportion to the budgets, the output head on
/// the device of the last layer. expert_parallel mode: per device every non-routed weight and
/// the whole KV (each rank runs attention itself), expert ranges in proportion to what each
/// budget has left after that; the output head on the first.
/// Throws ds4::Error when the lists differ in length or are empty, when every budget is 0, or
/// when the model does not fit: "model needs 81.2 GiB for ctx 32768 but cuda:1 can hold only
/// ..." naming the device and the shortfall.
GpuPlan plan_gpus(const ModelFootprint& fp, const std::vector<int>& devices,
                  const std::vector<uint64_t>& budgets, GpuPlanMode mode, uint64_t scratch_bytes);

}  // namespace ds4
