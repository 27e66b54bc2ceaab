// The DeepSeek V4 forward pass on the CPU (spec §3): layer-major over a batch of consecutive
// tokens. Projections run batched (backend/cpu/linear.h); the position-dependent steps (RoPE,
// KV store, compressors, indexer, attention) step through the batch token by token exactly as
// decode does, so every chunking of a prompt gives bit-identical logits (spec §4.2 contract).
// Within a token, attention heads and indexer rows may be split across threads
// (backend/cpu/parallel_steps.h), which changes no value either.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/linear.h"
#include "model/config.h"
#include "model/kv_state.h"
#include "model/weights.h"

namespace ds4::cpu {

/// Debug hook of Forward (parity checks against tools/reference): receives the named
/// intermediates of every token, with the names of the reference's trace
/// (tools/reference/README.md, "Recorded intermediates"): per layer `l{il}.` +
/// hc_attn.pre/post/comb, attn.h, attn.qr, attn.q [heads, head_dim], attn.kv (stored raw row),
/// attn.n_comp, attn.comp_row / idx.comp_row (when a row is emitted), idx.q [heads, dim],
/// idx.scores, idx.selected (when the indexer filters), attn.o [heads, head_dim], attn.low
/// (grouped low-rank vector), attn.y, hc_ffn.pre/post/comb, ffn.h, router.probs,
/// router.experts, router.weights, ffn.expert_mid [used, n_ff] and ffn.expert_out
/// [used, n_embd] (selection order), ffn.shared_mid, ffn.shared_out, ffn.y, state
/// [n_hc, n_embd]; and out.hc_weights, out.z, logits. Values are the f32 numbers the forward
/// pass computed; `shape` is the numpy (row-major) shape, its product equals the value count,
/// an empty shape is a scalar. Within one eval() calls come layer by layer, positions
/// ascending within a layer. The spans are only valid during the call.
class ForwardTrace {
 public:
  virtual ~ForwardTrace() = default;
  virtual void f32(int64_t pos, const std::string& name, std::span<const float> values,
                   const std::vector<int64_t>& shape) = 0;
  virtual void i32(int64_t pos, const std::string& name, std::span<const int32_t> values,
                   const std::vector<int64_t>& shape) = 0;
};

/// Runs batches of tokens through the model. One instance per session (it owns scratch).
class Forward {
 public:
  /// `threads` >= 1 threads (parallel::pool()) for the matrix products, attention heads and
  /// indexer rows.
  Forward(const model::Config& config, const model::Weights& weights, int threads);

  /// Evaluates tokens[0..n) at absolute positions pos0..pos0+n-1, updating `kv`. Writes the
  /// next-token logits (n_vocab f32) of the last token to `last_logits`, and when `all_logits`
  /// is non-empty (n * n_vocab) those of every token. Throws ds4::Error for a token id outside
  /// the vocabulary or positions beyond kv.ctx().
  void eval(std::span<const int32_t> tokens, int64_t pos0, model::KvState& kv,
            std::span<float> last_logits, std::span<float> all_logits = {});

  /// Bytes of weights a single-token decode step reads (for bandwidth reports).
  uint64_t decode_weight_bytes() const;

  /// Installs a debug trace sink (not owned; nullptr, the default, removes it). Without a sink
  /// tracing costs one branch per traced step and never changes a computed value.
  void set_trace(ForwardTrace* trace) { trace_ = trace; }

 private:
  void attention_layer(uint32_t il, std::span<const int32_t> tokens, int64_t pos0,
                       model::LayerKv& kv, int64_t raw_cap);
  void ffn_layer(uint32_t il, std::span<const int32_t> tokens, int64_t pos0);
  void hc_pre(const model::Matrix& fn, std::span<const float> scale, std::span<const float> base,
              int64_t n);
  void output_head(int64_t t, float* logits);
  void resize(int64_t n);
  // Trace helpers: name = "l{il}." + what (il < 0: what alone). Without a sink they are an
  // inlined branch (the shape list lives on the stack; nothing is allocated).
  void trace_f32(int64_t pos, int il, const char* what, const float* v,
                 std::initializer_list<int64_t> shape) {
    if (trace_) emit_f32(pos, il, what, v, shape);
  }
  void trace_i32(int64_t pos, int il, const char* what, const int32_t* v,
                 std::initializer_list<int64_t> shape) {
    if (trace_) emit_i32(pos, il, what, v, shape);
  }
  void emit_f32(int64_t pos, int il, const char* what, const float* v,
                std::initializer_list<int64_t> shape);
  void emit_i32(int64_t pos, int il, const char* what, const int32_t* v,
                std::initializer_list<int64_t> shape);

  const model::Config& c_;
  const model::Weights& w_;
  int threads_;
  ActScratch act_;
  // Batch buffers, row-major per token.
  std::vector<float> x_;        // n x hc_dim: hyper-connection state X
  std::vector<float> x_next_;   // n x hc_dim
  std::vector<float> mix_;      // n x hc_mix
  std::vector<float> pre_, post_, comb_;  // n x n_hc, n x n_hc, n x n_hc^2
  std::vector<float> sub_in_;   // n x n_embd: HC-pre output
  std::vector<float> h_;        // n x n_embd: normed sublayer input
  std::vector<float> y_;        // n x n_embd: sublayer output
  std::vector<float> qr_;       // n x q_lora (normed)
  std::vector<float> q_;        // n x q_dim
  std::vector<float> kv_row_;   // n x head_dim
  std::vector<float> ck_, cs_;  // n x compressor width
  std::vector<float> ik_, is_;  // n x indexer compressor width
  std::vector<float> iq_;       // n x indexer q dim
  std::vector<float> iw_;       // n x indexer heads
  std::vector<float> attn_;     // n x q_dim: attention output per head
  std::vector<float> low_;      // n x out_low_dim
  std::vector<float> row_, irow_;    // one compressed row (head_dim / indexer dim)
  std::vector<float> scores_;        // indexer scores / attention scratch
  std::vector<uint32_t> selected_;   // indexer selection
  std::vector<const float*> rows_;   // attention row pointers
  std::vector<float> router_logits_, router_p_;  // n x n_expert
  std::vector<int32_t> sel_;         // n x n_used
  std::vector<float> sel_w_;         // n x n_used
  std::vector<float> moe_;           // n x n_embd
  std::vector<float> gate_, up_, mid_;  // n x n_ff
  std::vector<float> down_;          // n x n_embd
  std::vector<int64_t> expert_tokens_;  // token list of one expert
  std::vector<float> gather_;        // gathered h rows for one expert
  std::vector<float> gather_w_;
  std::vector<float> head_z_, head_pre_, head_w_;
  std::vector<float> trace_expert_out_;  // n x n_used x n_embd, only while tracing
  std::vector<float> trace_expert_mid_;  // n x n_used x n_ff, only while tracing
  std::vector<int32_t> trace_ints_;
  ForwardTrace* trace_ = nullptr;
  int64_t cap_ = 0;
};

}  // namespace ds4::cpu
