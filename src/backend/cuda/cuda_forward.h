// One CUDA session: the KV/compressor/indexer state of spec §4.1 in device memory, scratch
// buffers, and the per-token forward step (the math of backend/cpu/forward.cpp, spec §3).
//
// A step reads everything that changes from token to token (position, token id, RoPE angles,
// ring slots, compressed-row counts) from device memory, so its launches are the same for every
// position of one "variant" (indexer selection active or not, logits or not). Each variant is
// captured once into a CUDA graph and replayed per token (one launch instead of ~1,100); set
// DS4_CUDA_GRAPH=0 in the environment to launch the kernels one by one instead (same kernels,
// same results). DS4_CUDA_PROFILE=1 times every operation of every step instead (graphs off)
// and prints the per-operation table to stderr when the session ends (step_profile.h).
//
// Prompts (eval of more than one token) run layer-major instead (cuda_prefill.cpp), in chunks
// of up to batch_tokens() tokens with the same kernels' arithmetic: bit-identical to stepping.
// DS4_CUDA_PREFILL_PROFILE=1 prints the prefill's per-phase device time when the session ends.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <optional>
#include <span>
#include <vector>

#include "backend/cuda/device_memory.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/expert_parallel.h"
#include "backend/cuda/l2_prefetch.h"
#include "backend/cuda/step_clock.h"
#include "backend/cuda/step_profile.h"
#include "model/config.h"
#include "model/kv_state.h"

namespace ds4::cuda {

/// Device state of one layer (model::LayerKv): raw ring, compressed rows, frontiers, and the
/// host's copy of the counters (for snapshots; the kernels derive them from the position).
struct DevLayerKv {
  uint32_t ratio = 0;
  DeviceArray<float> raw;            ///< raw_cap x head_dim
  DeviceArray<float> comp, index;    ///< (ctx/ratio + 2) rows of head_dim / indexer_head_dim
  DeviceArray<float> comp_kv, comp_score, index_kv, index_score;  ///< frontiers
  int64_t n_comp = 0, n_index = 0;   ///< rows emitted
  uint32_t comp_tokens = 0, index_tokens = 0;  ///< tokens pushed into each frontier
};

/// Decode call sites whose launches DS4_CUDA_NO_PDL can make without PDL (attention_layer /
/// ffn_layer; names in parse_no_pdl_sites' order).
/// Side-stream sites: Shexp (branch stream: the shared expert), Comp (branch stream: the
/// compressor and indexer-compressor pushes), Aux (aux stream: the KV row's norm/RoPE/store and
/// the indexer's chain), Sinkhorn (side stream).
enum class NoPdlSite : unsigned {
  HcPre, QaKv, Qb, Attn, Oa, Ob, Router, GateUp, Down,  // main chain
  Shexp, Comp, Aux, Sinkhorn,                           // side streams
  Count
};

/// The DS4_CUDA_NO_PDL value `list` as a bit per NoPdlSite: null (unset) gives the default,
/// `shexp:aux` (the shared expert's launches without PDL: +1.0-1.2 % decode, perf-notes "eleventh
/// pass"; the KV row store's and the indexer's: +0.9 %, "twelfth pass"); empty gives none; else
/// colon-separated names hc_pre, qa_kv, q_b, attn, o_a, o_b, router, gate_up, down, shexp, comp,
/// aux, sinkhorn. Throws ds4::Error naming the unknown site and the valid ones.
unsigned parse_no_pdl_sites(const char* list);

/// Decode sites of DS4_CUDA_PREFETCH: weights requested into L2 (l2_prefetch) on the prefetch
/// stream, beside the latency-bound launches that come before their readers (names in
/// parse_prefetch_sites' order). Q: q_a, kv and q_b from the attention's HC projection on;
/// Idx: the compressors' and the indexer's matrices there too (ratio-4 and ratio-128 layers);
/// Oa: o_a from q_b's end on (beside the attention); Router: the router's matrix from the FFN's
/// HC projection on; Shexp: the shared expert's three matrices there too; Down: the routed
/// experts' down rows from the router's selection on (beside the gate/up).
enum class PrefetchSite : unsigned { Q, Idx, Oa, Router, Shexp, Down, Count };

/// The DS4_CUDA_PREFETCH value `list` as a bit per PrefetchSite: null (unset) gives the default,
/// none (no site gained on an H100: perf-notes "Session 40"); empty gives none too; else
/// colon-separated names q, idx, o_a, router, shexp, down. Throws ds4::Error naming the unknown
/// site and the valid ones.
unsigned parse_prefetch_sites(const char* list);

/// Runs tokens through the model on the device for one session of `ctx` tokens.
class CudaForward {
 public:
  /// Allocates the state and scratch (model::KvState::estimate + synth::session_scratch_bytes
  /// bytes) and the RoPE angle tables of every position. Throws ds4::Error when ctx < 1 or
  /// memory runs out. With `shard` (expert parallelism, expert_parallel.h; copied) `dw` holds
  /// only the shard's routed experts; their output rows are summed over ranks by
  /// shard->reducer before the routed sum; CUDA graphs stay off when the reducer cannot be
  /// captured.
  CudaForward(const model::Config& c, const DeviceWeights& dw, int64_t ctx,
              const ExpertShard* shard = nullptr);
  ~CudaForward();
  CudaForward(const CudaForward&) = delete;
  CudaForward& operator=(const CudaForward&) = delete;

  /// Evaluates tokens at pos0.. (see BackendSession::eval for the contract). One token runs the
  /// decode step (graphs); more run layer-major in chunks of up to batch_tokens() (cuda_prefill.cpp):
  /// per layer the token-independent work over the whole chunk (multi-token matvecs, norms,
  /// routed experts grouped by expert), the position-dependent work (KV store, compressors,
  /// indexer, attention) token by token in order. Both give the same bits for any chunking.
  /// Token by token instead with an expert shard, DS4_CUDA_PROFILE, or DS4_CUDA_BATCH=0/1.
  void eval(std::span<const int32_t> tokens, int64_t pos0, std::span<float> last_logits,
            std::span<float> all_logits);
  /// Forgets every token.
  void reset();
  /// Copies the state into `out` (a KvState of this config and ctx).
  void export_state(model::KvState& out) const;
  /// Replaces the state from `in`. Throws ds4::Error when its ctx or shapes differ.
  void import_state(const model::KvState& in);
  int64_t ctx() const { return ctx_; }
  /// Most tokens per layer-major chunk (DS4_CUDA_BATCH=N overrides kDefaultBatchTokens; <= 1:
  /// the token-by-token step for every token).
  int batch_tokens() const { return batch_tokens_; }
  /// Prefill chunk size: DS4_CUDA_BATCH when set (at least 1), else kDefaultBatchTokens.
  static int default_batch_tokens();
  // 2K prefill on an H200 (flash-q2): 628 tok/s at 128, 837 at 512 (session 6); 1331 at 512,
  // 1473 at 1024, 1546 at 2048 (session 8). Scratch ~0.8 MB per token for flash.
  static constexpr int kDefaultBatchTokens = 2048;
  /// Bytes of the layer-major prefill's scratch for chunks of batch_tokens tokens whose quantized
  /// activation rows take at most max_act_bytes (the attention and indexer scores' 64 MiB caps
  /// included, all-token logits not).
  static uint64_t batch_scratch_bytes(const model::Config& c, uint64_t max_act_bytes, int batch_tokens);

 private:
  void step(int64_t pos, float* logits);
  void launch_step(bool indexer_on, bool logits);  // the kernels of one step, on stream_
  void release_streams();  // destroys the streams and events made so far
  // HC pre of one sublayer (spec §3.3) through the sublayer's input norm: h_ = norm(sub_in),
  // also quantized into h_q8_0_ / h_q8_k_ where a matrix of `readers` (the sublayer's op_h
  // matvecs; absent ones are skipped) reads that activation format.
  void hc_pre(const DevMatrix& fn, const DeviceArray<float>& scale, const DeviceArray<float>& base,
              const DeviceArray<float>& norm, std::initializer_list<const DevMatrix*> readers);
  void hc_norm_mv(const DevMatrix& fn, const float* x, float* out);  // out = fn · rms_norm_unweighted(x)
  void join_sinkhorn();  // stream_ waits for the side stream's post/comb (before hc_post)
  // Requests `ranges` into L2 on the prefetch stream once stream_'s work so far has completed,
  // when DS4_CUDA_PREFETCH names `site` (a no-op while profiling and on devices without bulk
  // prefetches); launch_step joins the prefetch stream back at its end.
  void prefetch(PrefetchSite site, std::initializer_list<L2Range> ranges);
  static L2Range whole(const DevMatrix& m) {  // every byte of m
    L2Range r;
    r.base = m.data;
    r.bytes = static_cast<uint64_t>(m.rows) * m.row_bytes;
    r.count = m ? 1 : 0;
    return r;
  }
  void fork(cudaStream_t to, cudaEvent_t ev);  // `to` waits for the work queued on stream_ so far
  // Work beside the main path on stream `s` (branch_ or aux_), all no-ops while profiling, except
  // that the section's launches skip PDL when DS4_CUDA_NO_PDL names `site`. begin_beside: launches
  // go to s, after stream_'s work so far; end_beside: records `join` on s, launches go back to stream_.
  void begin_beside(cudaStream_t s, cudaEvent_t fork, NoPdlSite site);
  void end_beside(cudaStream_t s, cudaEvent_t join);
  void join_beside(cudaEvent_t join);                   // stream_ waits for `join`
  void begin_branch(NoPdlSite site) { begin_beside(branch_, branch_fork_, site); }
  void end_branch() { end_beside(branch_, branch_join_); }
  void join_branch() { join_beside(branch_join_); }
  void attention_layer(uint32_t il, bool indexer_on);
  void ffn_layer(uint32_t il);
  void push_compressor(const DevMatrix& kv_w, const DevMatrix& gate_w, const DeviceArray<float>& ape,
                       const DeviceArray<float>& norm, bool indexer, uint32_t ratio,
                       DeviceArray<float>& state_kv, DeviceArray<float>& state_score,
                       DeviceArray<float>& rows);
  // compressor_chunk of n positions from pos0 with rows ck/cs [n][width] (batch_->pooled scratch).
  void chunk_compress(const float* ck, const float* cs, const DeviceArray<float>& ape, const DeviceArray<float>& norm,
                      bool indexer, uint32_t r, int64_t pos0, int n, DeviceArray<float>& state_kv,
                      DeviceArray<float>& state_score, DeviceArray<float>& rows);
  void mark(const char* op) {  // end of operation `op` (DS4_CUDA_PROFILE)
    if (prof_) prof_->mark(op);
  }
  void mv(const DevMatrix& w, const float* x, float* y) {
    matvec(w, 0, w.rows, 0, nullptr, 1, x, 0, y, 0, act_.get());
  }
  // A whole-matrix matvec as one job of matvec_pair (quantized input in act_).
  MatvecOp op(const DevMatrix& w, const float* x, float* y, uint8_t* act = nullptr) {
    MatvecOp o;
    o.w = &w;
    o.n_rows = w.rows;
    o.x = x;
    o.y = y;
    o.act = act ? act : act_.get();
    return o;
  }
  // A matvec of the sublayer input h_: reads it pre-quantized by hc_pre (h_q8_0_ / h_q8_k_) when
  // the weight's activation format is one of those, else as op() does.
  MatvecOp op_h(const DevMatrix& w, float* y, uint8_t* act = nullptr) {
    MatvecOp o = op(w, h_.get(), y, act);
    const ActFormat f = act_format(w.type);
    uint8_t* ready = f == ActFormat::Q8_0 && h_has_q8_0_   ? h_q8_0_.get()
                     : f == ActFormat::Q8_K && h_has_q8_k_ ? h_q8_k_.get()
                                                           : nullptr;
    if (ready) {
      o.act = ready;
      o.act_ready = true;
    }
    return o;
  }
  void pair(const MatvecOp& a, const MatvecOp& b) { matvec_pair(a, b); }

  // Layer-major prefill (cuda_prefill.cpp): scratch for up to batch_tokens_ tokens, [token][...].
  struct Batch {
    DeviceArray<float> x, x_next, mix, hc_scale, pre, post, comb, sub_in, h, y, qr, q, kv_row, ck, cs, ik, is, iq, iw,
        attn, low, router_logits, probs, sel_w, gate, up, mid, down, sh_gate, sh_up, sh_mid, sh_down, head_pre, z,
        logits, att, iscores, pooled;  // att, iscores: attention and indexer scores (grown on demand)
    DeviceArray<int32_t> sel, order, cnt, list;
    DeviceArray<uint32_t> top_k;  // [token][indexer_top_k] selected compressed rows
    DeviceArray<uint8_t> act;
  };
  void eval_batched(std::span<const int32_t> tokens, int64_t pos0, std::span<float> last_logits,
                    std::span<float> all_logits);
  void batch_chunk(int64_t pos0, int n, float* all_logits, float* last_logits);
  void batch_hc_pre(int n, const DevMatrix& fn, const DeviceArray<float>& scale, const DeviceArray<float>& base,
                    const DeviceArray<float>& norm);
  void batch_hc_norm_mv(const DevMatrix& fn, const float* x, int n, float* out);  // n tokens of hc_norm_mv
  void batch_attention(uint32_t il, int64_t pos0, int n);
  void batch_ffn(uint32_t il, int64_t pos0, int n);
  // y [n][w.rows] = W · x rows [n][w.cols] (x_stride floats apart) through matmat.
  void mm(const char* name, const DevMatrix& w, const float* x, int64_t x_stride, int n, float* y);

  // DS4_CUDA_PREFILL_PROFILE=1: device time of the prefill's phases (the stream is synchronised
  // at each phase end), printed to stderr when the session ends.
  // Also the device time of each named operation (op(); with a synchronisation on each side,
  // so the operations' sum exceeds the phases' by launch latencies).
  struct PrefillProfile {
    double ms[5] = {};
    int64_t tokens = 0;
    std::chrono::steady_clock::time_point last;
    std::map<std::string, std::pair<double, int64_t>> ops;  // name -> (ms, calls)
  };
  void pmark(int phase);  // ends the current phase (PrefillProfile::ms index)
  // Runs f(); under DS4_CUDA_PREFILL_PROFILE adds its device time to pprof_->ops[name].
  template <class F>
  void pop(const char* name, F&& f) {
    if (!pprof_) return f();
    const auto t0 = psync();
    f();
    auto& e = pprof_->ops[name];
    e.first += std::chrono::duration<double, std::milli>(psync() - t0).count();
    ++e.second;
  }
  std::chrono::steady_clock::time_point psync();  // synchronises the stream, returns the time

  int batch_tokens_ = kDefaultBatchTokens;
  std::unique_ptr<PrefillProfile> pprof_;
  std::unique_ptr<Batch> batch_;
  const model::Config& c_;
  const DeviceWeights& dw_;
  int64_t ctx_;
  uint32_t raw_cap_;
  int n_pair_;
  int64_t max_comp_ = 0;  // most compressed rows of any layer
  bool use_graphs_ = true;
  std::unique_ptr<StepProfile> prof_;  // DS4_CUDA_PROFILE set: per-operation times, graphs off
  std::unique_ptr<StepClock> clock_;   // DS4_CUDA_STEP_TIMES set: what lies around each decode step
  cudaStream_t stream_ = nullptr;
  cudaStream_t side_ = nullptr;                          // the HC Sinkhorn runs here, beside the sublayer
  cudaEvent_t fork_ = nullptr, join_ = nullptr;          // stream_ -> side_ and back (graph-capturable)
  // Branch stream: work that reads only h_ and its own buffers (the compressors, the shared
  // expert) runs beside the main path and is joined where its results are read. Off while
  // profiling (every operation then has its own time on stream_).
  cudaStream_t branch_ = nullptr;
  cudaEvent_t branch_fork_ = nullptr, branch_join_ = nullptr;
  // Aux stream: the KV row's norm+RoPE+store and the indexer query, scores and top-k run beside
  // q_b and the query norm+RoPE; the attention waits for them.
  cudaStream_t aux_ = nullptr;
  cudaEvent_t aux_fork_ = nullptr, aux_join_ = nullptr;
  cudaStream_t pf_ = nullptr;  // L2 prefetches (prefetch()), joined back at the step's end
  cudaEvent_t pf_fork_ = nullptr, pf_join_ = nullptr;
  unsigned prefetch_ = 0;    // PrefetchSite bits (DS4_CUDA_PREFETCH), 0 without bulk prefetches
  bool pf_pending_ = false;  // the current step has queued work on pf_
  cudaEvent_t idx_rows_ = nullptr;  // on branch_: the indexer compressor's rows of this step are in
  cudaGraphExec_t graphs_[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};  // [indexer_on][logits]
  std::vector<DevLayerKv> kv_;
  DeviceArray<float> rope_dense_, rope_comp_;  // [ctx][cos n_pair, sin n_pair]
  DeviceArray<int64_t> pos_, positions_;       // the step's position; 0..ctx-1 to copy it from
  // Scratch (one token).
  DeviceArray<float> x_, x_next_, flat_, mix_, pre_, post_, comb_, sub_in_, h_, y_, qr_, q_,
      kv_row_, ck_, cs_, iq_, iw_, attn_, low_, router_logits_, probs_, sel_w_, gate_, up_, mid_,
      down_, sh_down_, head_pre_, z_, logits_, row_, scores_, att_scratch_;
  DeviceArray<float> sh_gate_, sh_up_, sh_mid_;  // the shared expert's own buffers (branch stream)
  // Page-locked staging of a decode step's token (host -> device) and logits (device -> host):
  // asynchronous copies at full bus speed instead of the driver's pageable staging.
  PinnedArray<int32_t> token_host_;
  PinnedArray<float> logits_host_;
  DeviceArray<uint8_t> branch_act_;              // quantized inputs of branch-stream matvecs
  DeviceArray<uint8_t> aux_act_;                 // quantized inputs of aux-stream matvecs
  std::optional<ExpertShard> shard_;
  DeviceArray<int32_t> local_sel_;  // shard-local expert ids (-1: another rank's expert)
  DeviceArray<int32_t> sel_, order_, tokens_;  // tokens_: the id at each position (ctx)
  DeviceArray<uint32_t> top_k_;
  DeviceArray<uint8_t> act_;
  DeviceArray<uint8_t> h_q8_0_, h_q8_k_;  // h_ quantized by hc_pre (Q8_0 / Q8_K activation rows)
  bool h_has_q8_0_ = false, h_has_q8_k_ = false;  // what the last hc_pre wrote there (op_h reads only that)
  bool hc_fused_ = true;  // hc_pre weights in the projection's pre block (DS4_CUDA_HC_FUSED=0: off)
  bool attn_rope_fused_ = true;  // inverse RoPE in the attention's combine launch (DS4_CUDA_ATTN_ROPE_FUSED=0: off)
  bool idx_first_ = true;  // the indexer compressor before the main one on branch_ (DS4_CUDA_IDX_FIRST=0: after)
  int kv_main_ = 3;  // where the KV row store runs (kv_main_mode, DS4_CUDA_KV_MAIN)
  int idx_query_main_ = 2;  // indexer query parts on stream_ before q_b: 0, 1 (q_b+proj), 2 (+RoPE/QAT) (DS4_CUDA_IDX_QUERY_MAIN)
  bool attn_q8_fused_ = true;  // o_a's Q8_0 input from the attention's combine launch (DS4_CUDA_ATTN_Q8_FUSED=0: off)
  bool ob_post_ = true;  // the attention's hc_post in o_b's matvec epilogue (DS4_CUDA_OB_POST=0: a launch of its own)
  // Decode call sites whose launches skip PDL (DS4_CUDA_NO_PDL, a bit per NoPdlSite):
  // comparisons of where a dependent's blocks, parked early on the SMs, cost more than the
  // launch latency PDL hides.
  unsigned no_pdl_ = 0;
  bool no_pdl(NoPdlSite s) const { return (no_pdl_ >> static_cast<unsigned>(s)) & 1u; }
  bool beside_pdl_prev_ = false;  // pdl_suppressed() before begin_beside, restored by end_beside
};

}  // namespace ds4::cuda
