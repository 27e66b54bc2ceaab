// The model's tensors copied to CUDA device memory (spec §2.2 names): matrices keep their GGUF
// block bytes, 1-D vectors are f32. The token embedding is not uploaded: rows are dequantized
// on the host per token (a lookup, not a product).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cuda/device_memory.h"
#include "backend/cuda/kernels.h"
#include "model/config.h"
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
  /// Uploads `w` (bound for `c`). Throws ds4::Error for an unsupported matrix type (naming the
  /// tensor) or when device memory runs out.
  DeviceWeights(const model::Config& c, const model::Weights& w);

  std::vector<DevLayer> layers;
  DevMatrix output_hc_fn, output;
  DeviceArray<float> output_hc_scale, output_hc_base, output_norm;
  uint64_t bytes = 0;          ///< device bytes of all uploaded tensors
  size_t max_act_bytes = 0;    ///< largest quantized activation row of any uploaded matrix

 private:
  DevMatrix upload(const model::Matrix& m);
  DeviceArray<float> upload(const std::vector<float>& v);
  std::vector<DeviceArray<uint8_t>> store_;
};

}  // namespace ds4::cuda
