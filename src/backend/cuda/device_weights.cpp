#include "backend/cuda/device_weights.h"

#include <map>

#include "backend/cuda/synth_range.h"
#include "backend/synthetic/synthetic_model.h"
#include "quant/quant.h"

namespace ds4::cuda {

DevMatrix DeviceWeights::adopt(DeviceArray<uint8_t> buf, GgmlType type, int64_t cols, int64_t rows,
                               bool act) {
  DevMatrix d{static_cast<uint32_t>(type), buf.get(), cols, rows, quant::row_bytes(type, cols)};
  if (act) to_device_layout(d);  // matvec weights: the kernels' row layout
  bytes += buf.size();
  store_.push_back(std::move(buf));
  const size_t ab = act ? act_row_bytes(d.type, d.cols) : 0;
  if (ab > max_act_bytes) max_act_bytes = ab;
  return d;
}

DevMatrix DeviceWeights::upload(const model::Matrix& m) { return upload_rows(m, 0, m.rows); }

DevMatrix DeviceWeights::upload_rows(const model::Matrix& m, int64_t first, int64_t count) {
  if (!m) return {};
  switch (m.type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0:
    case GgmlType::Q2_K: case GgmlType::Q4_K: case GgmlType::IQ2_XXS: case GgmlType::MXFP4:
      break;
    default:
      fail("CUDA backend: tensor {} has type {} which the CUDA kernels do not support", m.name,
           static_cast<uint32_t>(m.type));
  }
  const size_t n = m.row_bytes * static_cast<size_t>(count);
  DeviceArray<uint8_t> buf(n);
  buf.upload(m.row(first), n);
  return adopt(std::move(buf), m.type, m.cols, count, true);
}

DeviceArray<float> DeviceWeights::upload(const std::vector<float>& v) {
  DeviceArray<float> d(v.size());
  d.upload(v.data(), v.size());
  bytes += v.size() * sizeof(float);
  return d;
}

DeviceWeights::DeviceWeights(const model::Config& c, const model::Weights& w, uint32_t expert_begin,
                             uint32_t expert_end, const std::function<void(uint64_t, uint64_t)>& progress) {
  if (expert_end == 0) expert_end = c.n_expert;
  if (expert_begin >= expert_end || expert_end > c.n_expert)
    fail("CUDA backend: expert range [{}, {}) is not within the model's {} experts", expert_begin,
         expert_end, c.n_expert);
  // Routed stacks hold n_expert blocks of rows; a shard keeps the rows of its experts.
  const auto experts = [&](const model::Matrix& m) {
    const int64_t per = m.rows / c.n_expert;
    return upload_rows(m, per * expert_begin, per * (expert_end - expert_begin));
  };
  switch (w.token_embd.type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0: break;
    default:
      fail("CUDA backend: token_embd.weight has type {}; the CUDA lookup supports F32, F16, BF16, Q8_0",
           ggml_type_name(w.token_embd.type));
  }
  {
    const size_t n = w.token_embd.row_bytes * static_cast<size_t>(w.token_embd.rows);
    DeviceArray<uint8_t> buf(n);
    buf.upload(w.token_embd.data, n);
    token_embd = adopt(std::move(buf), w.token_embd.type, w.token_embd.cols, w.token_embd.rows, false);
  }
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
    d.ffn_gate_exps = experts(s.ffn_gate_exps);
    d.ffn_up_exps = experts(s.ffn_up_exps);
    d.ffn_down_exps = experts(s.ffn_down_exps);
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
    if (progress) progress(il + 1, c.n_layer);
  }
  output_hc_fn = upload(w.output_hc_fn);
  output = upload(w.output);
  output_hc_scale = upload(w.output_hc_scale);
  output_hc_base = upload(w.output_hc_base);
  output_norm = upload(w.output_norm);
}

DeviceWeights::DeviceWeights(const model::Config& c, model::Recipe recipe, uint64_t seed,
                             uint32_t expert_begin, uint32_t expert_end) {
  c.validate("synthetic model config");
  if (expert_end == 0) expert_end = c.n_expert;
  if (expert_begin >= expert_end || expert_end > c.n_expert)
    fail("synthetic CUDA weights: expert range [{}, {}) is not within the model's {} experts",
         expert_begin, expert_end, c.n_expert);
  const bool all_experts = expert_begin == 0 && expert_end == c.n_expert;
  std::map<std::string, model::TensorSpec> specs;
  for (model::TensorSpec& s : model::expected_tensors(c)) specs.emplace(s.name, std::move(s));
  auto spec_of = [&](const std::string& name) -> const model::TensorSpec* {
    const auto it = specs.find(name);
    return it == specs.end() ? nullptr : &it->second;
  };
  auto elems = [](const model::TensorSpec& s) {
    uint64_t n = 1;
    for (uint64_t d : s.shape) n *= d;
    return n;
  };
  // A matrix generated in place: rows = all dims but the first (expert-major for 3-D stacks).
  auto mat = [&](const std::string& name) -> DevMatrix {
    const model::TensorSpec* s = spec_of(name);
    if (!s) return {};
    const GgmlType type = model::recipe_type(*s, recipe);
    const auto cols = static_cast<int64_t>(s->shape[0]);
    const auto rows = static_cast<int64_t>(elems(*s) / s->shape[0]);
    const synth::SynthParams p = synth::synth_params(type, synth::matrix_stdev(*s), synth::tensor_seed(seed, name));
    const size_t row_bytes = quant::row_bytes(type, cols);
    const bool routed = s->kind == model::TensorKind::RoutedGateUp || s->kind == model::TensorKind::RoutedDown;
    if (routed && !all_experts) {
      // Expert-major stack: expert e owns rows [e * per, (e + 1) * per) of the whole tensor.
      const int64_t per = rows / c.n_expert;
      const int64_t first_row = per * expert_begin, n_rows = per * (expert_end - expert_begin);
      const uint64_t blocks_per_row = row_bytes / p.block_bytes;
      DeviceArray<uint8_t> buf(row_bytes * static_cast<size_t>(n_rows), /*zero=*/false);
      synth_fill_range(p, buf.get(), static_cast<uint64_t>(first_row) * blocks_per_row,
                       static_cast<uint64_t>(n_rows) * blocks_per_row);
      check(cudaGetLastError(), "synthetic expert shard generation");
      return adopt(std::move(buf), type, cols, n_rows, true);
    }
    DeviceArray<uint8_t> buf(row_bytes * static_cast<size_t>(rows), /*zero=*/false);
    synth_fill(p, buf.get(), buf.size() / p.block_bytes);
    check(cudaGetLastError(), "synthetic weight generation");
    return adopt(std::move(buf), type, cols, rows, s->kind != model::TensorKind::TokenEmbedding);
  };
  auto vec = [&](const std::string& name) -> DeviceArray<float> {
    const model::TensorSpec* s = spec_of(name);
    if (!s) return {};
    std::vector<float> v(elems(*s));
    synth::fill_vector(*s, c, seed, v);
    return upload(v);
  };
  token_embd = mat("token_embd.weight");
  layers.resize(c.n_layer);
  for (uint32_t il = 0; il < c.n_layer; ++il) {
    DevLayer& d = layers[il];
    const std::string b = "blk." + std::to_string(il) + ".";
    d.hc_attn_fn = mat(b + "hc_attn_fn.weight");
    d.hc_ffn_fn = mat(b + "hc_ffn_fn.weight");
    d.attn_q_a = mat(b + "attn_q_a.weight");
    d.attn_q_b = mat(b + "attn_q_b.weight");
    d.attn_kv = mat(b + "attn_kv.weight");
    d.attn_output_a = mat(b + "attn_output_a.weight");
    d.attn_output_b = mat(b + "attn_output_b.weight");
    d.comp_kv = mat(b + "attn_compressor_kv.weight");
    d.comp_gate = mat(b + "attn_compressor_gate.weight");
    d.idx_q_b = mat(b + "indexer.attn_q_b.weight");
    d.idx_proj = mat(b + "indexer.proj.weight");
    d.idx_comp_kv = mat(b + "indexer_compressor_kv.weight");
    d.idx_comp_gate = mat(b + "indexer_compressor_gate.weight");
    d.ffn_gate_inp = mat(b + "ffn_gate_inp.weight");
    d.ffn_gate_exps = mat(b + "ffn_gate_exps.weight");
    d.ffn_up_exps = mat(b + "ffn_up_exps.weight");
    d.ffn_down_exps = mat(b + "ffn_down_exps.weight");
    d.ffn_gate_shexp = mat(b + "ffn_gate_shexp.weight");
    d.ffn_up_shexp = mat(b + "ffn_up_shexp.weight");
    d.ffn_down_shexp = mat(b + "ffn_down_shexp.weight");
    d.hc_attn_scale = vec(b + "hc_attn_scale.weight");
    d.hc_attn_base = vec(b + "hc_attn_base.weight");
    d.hc_ffn_scale = vec(b + "hc_ffn_scale.weight");
    d.hc_ffn_base = vec(b + "hc_ffn_base.weight");
    d.attn_norm = vec(b + "attn_norm.weight");
    d.attn_q_a_norm = vec(b + "attn_q_a_norm.weight");
    d.attn_kv_a_norm = vec(b + "attn_kv_a_norm.weight");
    d.attn_sinks = vec(b + "attn_sinks.weight");
    d.comp_ape = vec(b + "attn_compressor_ape.weight");
    d.comp_norm = vec(b + "attn_compressor_norm.weight");
    d.idx_comp_ape = vec(b + "indexer_compressor_ape.weight");
    d.idx_comp_norm = vec(b + "indexer_compressor_norm.weight");
    d.ffn_norm = vec(b + "ffn_norm.weight");
    d.exp_probs_b = vec(b + "exp_probs_b.bias");
    if (c.is_hash_layer(il)) {
      const std::vector<int32_t> ids = synth::hash_table(c, synth::tensor_seed(seed, b + "ffn_gate_tid2eid.weight"));
      d.tid2eid = DeviceArray<int32_t>(ids.size());
      d.tid2eid.upload(ids.data(), ids.size());
      bytes += ids.size() * sizeof(int32_t);
    }
  }
  output_hc_fn = mat("output_hc_fn.weight");
  output = mat("output.weight");
  output_hc_scale = vec("output_hc_scale.weight");
  output_hc_base = vec("output_hc_base.weight");
  output_norm = vec("output_norm.weight");
  check(cudaDeviceSynchronize(), "synthetic weight generation");
}

}  // namespace ds4::cuda
