// Synthetic full-size models for ds4-bench --synthetic (issue #6): the real Flash/Pro shapes
// (model::Config::flash()/pro(), model::expected_tensors) with the real quant types
// (model::recipe_type) and seeded random weights that a backend generates in place
// (synthetic_blocks.h), plus the device memory plan printed before anything is allocated.
// Host-only arithmetic; the CUDA backend does the generation (cuda::make_synthetic_backend).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/synthetic/synthetic_blocks.h"
#include "common/ggml_type.h"
#include "model/config.h"
#include "model/layout.h"

namespace ds4::synth {

/// A named synthetic model: "flash-q2", "flash-q4" or "pro-q2".
struct SyntheticSpec {
  std::string name;
  model::Config config;
  model::Recipe recipe = model::Recipe::q2;
};

/// The accepted names, in the order help text lists them.
std::vector<std::string_view> synthetic_names();

/// Resolves a synthetic model name. Throws ds4::Error "unknown synthetic model 'X' (expected
/// flash-q2, flash-q4 or pro-q2)".
SyntheticSpec parse_synthetic(std::string_view name);

/// `spec` cut to its first `n_layer` layers (ds4-bench --synthetic-layers: measure a model that
/// does not fit the GPU on part of its depth; per-token rates then cover those layers only).
/// Per-layer arrays (compress ratios, SwiGLU clamps) keep their first n_layer entries, the hash
/// layers their count capped at n_layer; every shape and quant type of a kept layer is the full
/// model's. The name gains " (first N of M layers)" when N < M. Throws ds4::Error when n_layer is
/// 0 or more than the model has.
SyntheticSpec with_layers(SyntheticSpec spec, uint32_t n_layer);

/// Seed of one tensor: the model seed mixed with the tensor name (FNV-1a), so a tensor's
/// values do not depend on the order tensors are generated.
uint64_t tensor_seed(uint64_t model_seed, std::string_view tensor_name);

/// Per-element standard deviation of a matrix tensor, tools/make-model's rule: 1/sqrt(fan-in)
/// (spec.shape[0]), 1 for the token embedding, 0.3 for compressor position embeddings.
float matrix_stdev(const model::TensorSpec& spec);

/// Generator parameters of a matrix of `type` with element stdev `stdev` (> 0, finite):
/// uniform amplitude for F32/F16/BF16, f16 block scales for Q8_0/Q2_K/Q4_K/IQ2_XXS chosen so
/// the dequantized elements have that stdev and mean 0. Throws ds4::Error for any other type
/// or a bad stdev.
SynthParams synth_params(GgmlType type, float stdev, uint64_t seed);

/// Fills a 1-D f32 tensor (norms, HC scales/bases, sinks, router bias) or a compressor APE
/// table (kept as f32 rows by the backends) with make-model's values for that name.
/// `out` must have the tensor's element count.
void fill_vector(const model::TensorSpec& spec, const model::Config& c, uint64_t model_seed,
                 std::vector<float>& out);

/// ffn_gate_tid2eid of a hash layer: n_vocab rows of n_expert_used distinct expert ids.
std::vector<int32_t> hash_table(const model::Config& c, uint64_t seed);

/// Bytes tensor `spec` of GGUF type `type` takes in a backend's device memory: matrices keep
/// their block bytes; vectors, hash tables and compressor APE tables are stored as 4-byte
/// elements whatever their file type. Throws ds4::Error when a matrix type is not a weight type.
uint64_t device_tensor_bytes(const model::TensorSpec& spec, GgmlType type);

/// Device memory of one backend instance with one session of `ctx` tokens, in bytes.
struct MemoryPlan {
  uint64_t weights = 0;  ///< every tensor: matrices in their block format, vectors/APE f32, hash tables i32
  uint64_t kv = 0;       ///< KV/compressor/indexer state (model::KvState::estimate(c, ctx).total())
  uint64_t scratch = 0;  ///< one session's per-token buffers and quantized activations
  int64_t ctx = 0;
  uint64_t total() const { return weights + kv + scratch; }
  /// One line: "weights 80.12 GiB + KV/compressor/indexer 0.45 GiB (ctx 32897) + scratch 0.01 GiB = 80.58 GiB".
  std::string describe() const;
};

/// Bytes of a session's scratch buffers for `ctx` tokens (cuda::CudaForward allocates exactly
/// these; see its constructor): f32 per-token vectors, the attention score rows, top-k ids, and
/// quantized activations of up to max(n_expert_used, n_out_group) rows of `max_act_row_bytes`.
uint64_t session_scratch_bytes(const model::Config& c, int64_t ctx, uint64_t max_act_row_bytes);

/// The plan of a model whose tensor types are given by `type_of` (e.g. model::recipe_type with
/// a recipe, or the types of a loaded file). Throws ds4::Error when ctx < 1 or a type is not a
/// weight type.
MemoryPlan plan_memory(const model::Config& c,
                       const std::function<GgmlType(const model::TensorSpec&)>& type_of, int64_t ctx);

/// Weight bytes one decode token reads (cpu::Forward::decode_weight_bytes' rule): every matrix
/// but the token embedding, routed expert stacks scaled by n_expert_used / n_expert. Throws as
/// plan_memory does.
uint64_t decode_weight_bytes(const model::Config& c,
                             const std::function<GgmlType(const model::TensorSpec&)>& type_of);

/// Throws ds4::Error unless plan.total() plus `headroom` bytes fit in min(free_bytes, cap),
/// cap = cap_gib GiB when cap_gib > 0 (--gpu-vram). The message names `what`, the plan, the
/// free memory and the cap, and suggests a smaller context or model.
void check_fits(const MemoryPlan& plan, uint64_t free_bytes, double cap_gib, std::string_view what,
                uint64_t headroom = uint64_t{512} << 20);

}  // namespace ds4::synth
