// The model's tensors in CUDA device memory (spec §2.2 names): matrices keep their GGUF block
// bytes, 1-D vectors and compressor position tables are f32. Either copied from a loaded file
// or generated in place for a synthetic model (ds4-bench --synthetic, no host copy at all).
#pragma once

#include <functional>

#include <cstdint>
#include <vector>

#include "backend/cuda/device_memory.h"
#include "backend/cuda/kernels.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/weights.h"

namespace ds4::cuda {

/// Device copies of one layer's tensors (model::LayerWeights; empty when the layer has none).
struct DevLayer {
  DevMatrix hc_attn_fn, hc_ffn_fn, attn_q_a, attn_q_b, attn_kv, attn_output_a, attn_output_b;
  DevMatrix comp_kv, comp_gate, idx_q_b, idx_proj, idx_comp_kv, idx_comp_gate;
  DevMatrix ffn_gate_inp, ffn_gate_exps, ffn_up_exps, ffn_down_exps;
  DevMatrix ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp;
  DeviceArray<float> hc_attn_scale, hc_attn_base, hc_ffn_scale, hc_ffn_base;
  DeviceArray<float> attn_norm, attn_q_a_norm, attn_kv_a_norm, attn_sinks;
  DeviceArray<float> comp_ape, comp_norm, idx_comp_ape, idx_comp_norm;
  DeviceArray<float> ffn_norm, exp_probs_b;
  DeviceArray<int32_t> tid2eid;
};

/// Every tensor the CUDA forward pass reads, in device memory.
class DeviceWeights {
 public:
  /// Uploads `w` (bound for `c`). With expert parallelism only the routed experts
  /// [expert_begin, expert_end) are uploaded (their rows of ffn_{gate,up,down}_exps, local ids
  /// 0..end-begin-1); expert_end 0 means every expert. Throws ds4::Error for an unsupported
  /// matrix type (naming the tensor), a bad expert range, or when device memory runs out.
  /// `progress` (optional) is called after each layer with (layers uploaded, n_layer).
  DeviceWeights(const model::Config& c, const model::Weights& w, uint32_t expert_begin = 0,
                uint32_t expert_end = 0, const std::function<void(uint64_t, uint64_t)>& progress = {});

  /// Generates a synthetic model of config `c` directly in device memory: every tensor of
  /// model::expected_tensors(c) with type model::recipe_type(spec, recipe) and seeded random
  /// blocks (synth::synth_block, stdev synth::matrix_stdev), vectors and hash tables from
  /// synth::fill_vector / synth::hash_table. With expert parallelism only the routed experts
  /// [expert_begin, expert_end) are generated (local ids 0..end-begin-1): their rows of
  /// ffn_{gate,up,down}_exps with the same tensor seeds and block indices as in the whole
  /// tensor, so they equal those rows of the single-device model byte for byte; expert_end 0
  /// means every expert. Throws ds4::Error for a bad expert range or when device memory runs
  /// out.
  DeviceWeights(const model::Config& c, model::Recipe recipe, uint64_t seed, uint32_t expert_begin = 0,
                uint32_t expert_end = 0);

  std::vector<DevLayer> layers;
  DevMatrix token_embd;  ///< [n_embd, n_vocab], F32/F16/BF16/Q8_0 (rows looked up by embed())
  DevMatrix output_hc_fn, output;
  DeviceArray<float> output_hc_scale, output_hc_base, output_norm;
  uint64_t bytes = 0;          ///< device bytes of all uploaded tensors
  size_t max_act_bytes = 0;    ///< largest quantized activation row of any uploaded matrix

 private:
  DevMatrix upload(const model::Matrix& m);
  /// Rows [first, first + count) of m only.
  DevMatrix upload_rows(const model::Matrix& m, int64_t first, int64_t count);
  /// Takes ownership of `buf` (rows x row_bytes in GGUF layout); `act` marks a matvec weight,
  /// which is rewritten into the kernels' row layout (to_device_layout).
  DevMatrix adopt(DeviceArray<uint8_t> buf, GgmlType type, int64_t cols, int64_t rows, bool act);
  DeviceArray<float> upload(const std::vector<float>& v);
  std::vector<DeviceArray<uint8_t>> store_;
};

}  // namespace ds4::cuda
