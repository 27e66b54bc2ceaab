// One CUDA session: the KV/compressor/indexer state of spec §4.1 in device memory, scratch
// buffers, and the per-token forward step (the math of backend/cpu/forward.cpp, spec §3).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cuda/device_memory.h"
#include "backend/cuda/device_weights.h"
#include "model/config.h"
#include "model/kv_state.h"
#include "model/weights.h"

namespace ds4::cuda {

/// Device state of one layer (model::LayerKv): raw ring, compressed rows, frontiers, counters.
struct DevLayerKv {
  uint32_t ratio = 0;
  DeviceArray<float> raw;            ///< raw_cap x head_dim
  DeviceArray<float> comp, index;    ///< (ctx/ratio + 2) rows of head_dim / indexer_head_dim
  DeviceArray<float> comp_kv, comp_score, index_kv, index_score;  ///< frontiers
  int64_t n_comp = 0, n_index = 0;   ///< rows emitted
  uint32_t comp_tokens = 0, index_tokens = 0;  ///< tokens pushed into each frontier
};

/// Runs tokens through the model on the device for one session of `ctx` tokens.
class CudaForward {
 public:
  /// Allocates the state and scratch. Throws ds4::Error when ctx < 1 or memory runs out.
  CudaForward(const model::Config& c, const model::Weights& w, const DeviceWeights& dw, int64_t ctx);

  /// Evaluates tokens at pos0.. one at a time (see BackendSession::eval for the contract).
  void eval(std::span<const int32_t> tokens, int64_t pos0, std::span<float> last_logits,
            std::span<float> all_logits);
  /// Forgets every token.
  void reset();
  /// Copies the state into `out` (a KvState of this config and ctx).
  void export_state(model::KvState& out) const;
  /// Replaces the state from `in`. Throws ds4::Error when its ctx or shapes differ.
  void import_state(const model::KvState& in);
  int64_t ctx() const { return ctx_; }

 private:
  void step(int32_t token, int64_t pos, float* logits);
  void hc_pre(const DevMatrix& fn, const DeviceArray<float>& scale, const DeviceArray<float>& base);
  void attention_layer(uint32_t il, int64_t pos);
  void ffn_layer(uint32_t il, int32_t token);
  void push_compressor(const DevMatrix& kv_w, const DevMatrix& gate_w, const DeviceArray<float>& ape,
                       const DeviceArray<float>& norm, bool indexer, uint32_t ratio, int64_t pos,
                       DeviceArray<float>& state_kv, DeviceArray<float>& state_score,
                       uint32_t& tokens, DeviceArray<float>& rows, int64_t& n_rows);
  void mv(const DevMatrix& w, const float* x, float* y) {
    matvec(w, 0, w.rows, 0, nullptr, 1, x, 0, y, 0, act_.get());
  }

  const model::Config& c_;
  const model::Weights& w_;
  const DeviceWeights& dw_;
  int64_t ctx_;
  uint32_t raw_cap_;
  std::vector<DevLayerKv> kv_;
  RopeCs rope_dense_, rope_comp_;   // angles at the current position
  // Scratch (one token).
  DeviceArray<float> x_, x_next_, flat_, mix_, pre_, post_, comb_, sub_in_, h_, y_, qr_, q_,
      kv_row_, ck_, cs_, iq_, iw_, attn_, low_, router_logits_, probs_, sel_w_, gate_, up_, mid_,
      down_, sh_down_, head_pre_, z_, logits_, row_, scores_, att_scratch_;
  DeviceArray<int32_t> sel_, order_;
  DeviceArray<uint32_t> top_k_;
  DeviceArray<uint8_t> act_;
  std::vector<float> e_host_, x_host_;
};

}  // namespace ds4::cuda
