#include "backend/cuda/device_weights.h"

#include "quant/quant.h"

namespace ds4::cuda {

DevMatrix DeviceWeights::upload(const model::Matrix& m) {
  if (!m) return {};
  switch (m.type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0:
    case GgmlType::Q2_K: case GgmlType::Q4_K: case GgmlType::IQ2_XXS: case GgmlType::MXFP4:
      break;
    default:
      fail("CUDA backend: tensor {} has type {} which the CUDA kernels do not support", m.name,
           static_cast<uint32_t>(m.type));
  }
  const size_t n = m.row_bytes * static_cast<size_t>(m.rows);
  DeviceArray<uint8_t> buf(n);
  buf.upload(m.data, n);
  DevMatrix d{static_cast<uint32_t>(m.type), buf.get(), m.cols, m.rows, m.row_bytes};
  store_.push_back(std::move(buf));
  bytes += n;
  const size_t ab = act_row_bytes(d.type, d.cols);
  if (ab > max_act_bytes) max_act_bytes = ab;
  return d;
}

DeviceArray<float> DeviceWeights::upload(const std::vector<float>& v) {
  DeviceArray<float> d(v.size());
  d.upload(v.data(), v.size());
  bytes += v.size() * sizeof(float);
  return d;
}

DeviceWeights::DeviceWeights(const model::Config& c, const model::Weights& w) {
  layers.resize(c.n_layer);
  for (uint32_t il = 0; il < c.n_layer; ++il) {
    const model::LayerWeights& s = w.layers[il];
    DevLayer& d = layers[il];
    d.hc_attn_fn = upload(s.hc_attn_fn);
    d.hc_ffn_fn = upload(s.hc_ffn_fn);
    d.attn_q_a = upload(s.attn_q_a);
    d.attn_q_b = upload(s.attn_q_b);
    d.attn_kv = upload(s.attn_kv);
    d.attn_output_a = upload(s.attn_output_a);
    d.attn_output_b = upload(s.attn_output_b);
    d.comp_kv = upload(s.comp_kv);
    d.comp_gate = upload(s.comp_gate);
    d.idx_q_b = upload(s.idx_q_b);
    d.idx_proj = upload(s.idx_proj);
    d.idx_comp_kv = upload(s.idx_comp_kv);
    d.idx_comp_gate = upload(s.idx_comp_gate);
    d.ffn_gate_inp = upload(s.ffn_gate_inp);
    d.ffn_gate_exps = upload(s.ffn_gate_exps);
    d.ffn_up_exps = upload(s.ffn_up_exps);
    d.ffn_down_exps = upload(s.ffn_down_exps);
    d.ffn_gate_shexp = upload(s.ffn_gate_shexp);
    d.ffn_up_shexp = upload(s.ffn_up_shexp);
    d.ffn_down_shexp = upload(s.ffn_down_shexp);
    d.hc_attn_scale = upload(s.hc_attn_scale);
    d.hc_attn_base = upload(s.hc_attn_base);
    d.hc_ffn_scale = upload(s.hc_ffn_scale);
    d.hc_ffn_base = upload(s.hc_ffn_base);
    d.attn_norm = upload(s.attn_norm);
    d.attn_q_a_norm = upload(s.attn_q_a_norm);
    d.attn_kv_a_norm = upload(s.attn_kv_a_norm);
    d.attn_sinks = upload(s.attn_sinks);
    d.comp_ape = upload(s.comp_ape);
    d.comp_norm = upload(s.comp_norm);
    d.idx_comp_ape = upload(s.idx_comp_ape);
    d.idx_comp_norm = upload(s.idx_comp_norm);
    d.ffn_norm = upload(s.ffn_norm);
    d.exp_probs_b = upload(s.exp_probs_b);
    d.tid2eid = DeviceArray<int32_t>(s.tid2eid.size());
    d.tid2eid.upload(s.tid2eid.data(), s.tid2eid.size());
    bytes += s.tid2eid.size() * sizeof(int32_t);
  }
  output_hc_fn = upload(w.output_hc_fn);
  output = upload(w.output);
  output_hc_scale = upload(w.output_hc_scale);
  output_hc_base = upload(w.output_hc_base);
  output_norm = upload(w.output_norm);
}

}  // namespace ds4::cuda
