#include "model/weights.h"

#include <fmt/format.h>

#include <cstring>

#include "common/error.h"
#include "gguf/reader.h"
#include "quant/quant.h"

namespace ds4::model {
namespace {

class Binder {
 public:
  Binder(const gguf::Reader& r, uint64_t& bytes) : r_(r), bytes_(bytes) {}

  const gguf::TensorInfo& info(const std::string& name) const { return r_.tensor(name); }
  bool has(const std::string& name) const { return r_.find_tensor(name) != nullptr; }

  /// A 2-D matrix, or a 3-D expert stack flattened to rows.
  Matrix matrix(const std::string& name) const {
    const auto& t = info(name);
    if (!quant::is_weight_type(t.type()))
      fail("{}: tensor '{}' has type {}, which cannot be used as a weight matrix", r_.name(), name,
           ggml_type_name(t.type_id));
    Matrix m;
    m.type = t.type();
    m.data = t.data;
    m.cols = static_cast<int64_t>(t.dims[0]);
    m.rows = static_cast<int64_t>(t.n_elements / t.dims[0]);
    m.row_bytes = quant::row_bytes(m.type, m.cols);
    m.name = name;
    bytes_ += t.n_bytes;
    return m;
  }

  /// Any float tensor dequantized to an owned f32 vector (small tensors only).
  std::vector<float> vec(const std::string& name) const {
    const auto& t = info(name);
    if (!quant::is_supported(t.type()))
      fail("{}: tensor '{}' has unsupported type {}", r_.name(), name, ggml_type_name(t.type_id));
    std::vector<float> out(t.n_elements);
    const auto block = ggml_type_info(t.type_id)->block_elems;
    if (t.n_elements % block != 0)
      fail("{}: tensor '{}' has {} elements, not a multiple of the {}-element {} block", r_.name(),
           name, t.n_elements, block, ggml_type_name(t.type_id));
    quant::dequantize_row(t.type(), t.data, out.data(), static_cast<int64_t>(t.n_elements));
    return out;
  }

  std::vector<int32_t> i32(const std::string& name) const {
    const auto& t = info(name);
    if (t.type() != GgmlType::I32)
      fail("{}: tensor '{}' has type {}, expected I32", r_.name(), name, ggml_type_name(t.type_id));
    std::vector<int32_t> out(t.n_elements);
    std::memcpy(out.data(), t.data, t.n_elements * 4);
    return out;
  }

 private:
  const gguf::Reader& r_;
  uint64_t& bytes_;
};

}  // namespace

Weights bind_weights(const Config& c, const gguf::Reader& reader) {
  Weights w;
  Binder b(reader, w.matrix_bytes);
  w.token_embd = b.matrix("token_embd.weight");
  w.output_hc_fn = b.matrix("output_hc_fn.weight");
  w.output_hc_scale = b.vec("output_hc_scale.weight");
  w.output_hc_base = b.vec("output_hc_base.weight");
  w.output_norm = b.vec("output_norm.weight");
  w.output = b.matrix("output.weight");
  w.layers.resize(c.n_layer);
  for (uint32_t il = 0; il < c.n_layer; ++il) {
    LayerWeights& L = w.layers[il];
    auto n = [il](const char* suffix) { return fmt::format("blk.{}.{}", il, suffix); };
    L.hc_attn_fn = b.matrix(n("hc_attn_fn.weight"));
    L.hc_attn_scale = b.vec(n("hc_attn_scale.weight"));
    L.hc_attn_base = b.vec(n("hc_attn_base.weight"));
    L.hc_ffn_fn = b.matrix(n("hc_ffn_fn.weight"));
    L.hc_ffn_scale = b.vec(n("hc_ffn_scale.weight"));
    L.hc_ffn_base = b.vec(n("hc_ffn_base.weight"));
    L.attn_norm = b.vec(n("attn_norm.weight"));
    L.attn_q_a = b.matrix(n("attn_q_a.weight"));
    L.attn_q_a_norm = b.vec(n("attn_q_a_norm.weight"));
    L.attn_q_b = b.matrix(n("attn_q_b.weight"));
    L.attn_kv = b.matrix(n("attn_kv.weight"));
    L.attn_kv_a_norm = b.vec(n("attn_kv_a_norm.weight"));
    L.attn_sinks = b.vec(n("attn_sinks.weight"));
    L.attn_output_a = b.matrix(n("attn_output_a.weight"));
    L.attn_output_b = b.matrix(n("attn_output_b.weight"));
    const uint32_t ratio = c.compress_ratio(il);
    if (ratio != 0) {
      L.comp_ape = b.vec(n("attn_compressor_ape.weight"));
      L.comp_kv = b.matrix(n("attn_compressor_kv.weight"));
      L.comp_gate = b.matrix(n("attn_compressor_gate.weight"));
      L.comp_norm = b.vec(n("attn_compressor_norm.weight"));
    }
    if (ratio == 4) {
      L.idx_q_b = b.matrix(n("indexer.attn_q_b.weight"));
      L.idx_proj = b.matrix(n("indexer.proj.weight"));
      L.idx_comp_ape = b.vec(n("indexer_compressor_ape.weight"));
      L.idx_comp_kv = b.matrix(n("indexer_compressor_kv.weight"));
      L.idx_comp_gate = b.matrix(n("indexer_compressor_gate.weight"));
      L.idx_comp_norm = b.vec(n("indexer_compressor_norm.weight"));
    }
    L.ffn_norm = b.vec(n("ffn_norm.weight"));
    L.ffn_gate_inp = b.matrix(n("ffn_gate_inp.weight"));
    if (b.has(n("exp_probs_b.bias"))) L.exp_probs_b = b.vec(n("exp_probs_b.bias"));
    L.ffn_gate_exps = b.matrix(n("ffn_gate_exps.weight"));
    L.ffn_up_exps = b.matrix(n("ffn_up_exps.weight"));
    L.ffn_down_exps = b.matrix(n("ffn_down_exps.weight"));
    L.ffn_gate_shexp = b.matrix(n("ffn_gate_shexp.weight"));
    L.ffn_up_shexp = b.matrix(n("ffn_up_shexp.weight"));
    L.ffn_down_shexp = b.matrix(n("ffn_down_shexp.weight"));
    if (c.is_hash_layer(il)) {
      L.tid2eid = b.i32(n("ffn_gate_tid2eid.weight"));
      for (int32_t e : L.tid2eid)
        if (e < 0 || static_cast<uint32_t>(e) >= c.n_expert)
          fail("{}: tensor '{}' holds expert id {}, outside [0, {})", reader.name(),
               n("ffn_gate_tid2eid.weight"), e, c.n_expert);
    }
  }
  return w;
}

}  // namespace ds4::model
