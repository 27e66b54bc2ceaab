// Layer-major prefill of the CUDA backend (CudaForward::eval for more than one token), the
// design of the CPU forward (backend/cpu/forward.cpp): per layer, the token-independent work of
// a chunk of tokens runs over the whole chunk (projections as multi-token matvecs, norms, SwiGLU,
// routed experts grouped by expert), and so does the position-dependent work where each
// position's result is fixed by values already known: the KV rows, the compressor pushes (each
// emission pooled from the chunk's rows and the state at its start), the attention (each token
// bounded by its position), the indexer's scores and top-k. Every value is computed in the same
// operation order as the decode step (matmat equals matvec bit for bit), so logits and state are
// bit-identical to token-by-token evaluation for any chunking. Everything runs on the main stream.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/launch_stream.h"
#include "common/error.h"

namespace ds4::cuda {

void CudaForward::pmark(int phase) {
  if (!pprof_) return;
  check(cudaStreamSynchronize(stream_), "prefill profile");
  const auto now = std::chrono::steady_clock::now();
  pprof_->ms[phase] += std::chrono::duration<double, std::milli>(now - pprof_->last).count();
  pprof_->last = now;
}

std::chrono::steady_clock::time_point CudaForward::psync() {
  check(cudaStreamSynchronize(stream_), "prefill profile");
  return std::chrono::steady_clock::now();
}

void CudaForward::mm(const char* name, const DevMatrix& w, const float* x, int64_t x_stride, int n, float* y) {
  MatmatOp o;
  o.w = &w;
  o.n_rows = w.rows;
  o.n_tok = n;
  o.x = x;
  o.x_stride = x_stride;
  o.n_in = n;
  o.y = y;
  o.y_stride = w.rows;
  o.act = batch_->act.get();
  pop(name, [&] { matmat(o); });
}

namespace {

// Score floats of one batched attention launch pair (a chunk's tokens take several launches when
// their rows need more: long contexts at ratio 128).
constexpr int64_t kAttScratchFloats = int64_t{16} << 20;

// Calls f(array, elements) for each prefill scratch array of a chunk of t tokens (the one list
// that both allocates them and sizes them for the memory plan); logits, att and iscores are
// grown on demand (batch_scratch_bytes adds the score arrays' caps).
template <class B, class F>
void each_batch_array(B& b, const model::Config& c, uint64_t max_act_bytes, size_t t, F&& f) {
  const size_t hc = c.hc_dim(), D = c.n_embd, nh = c.n_hc, U = c.n_expert_used, FF = c.n_ff_exp;
  const size_t HD = c.head_dim, ID = c.indexer_head_dim, E = c.n_expert;
  f(b.x, t * hc);
  f(b.x_next, t * hc);
  f(b.mix, t * c.hc_mix());
  f(b.hc_scale, t);
  f(b.pre, t * nh);
  f(b.post, t * nh);
  f(b.comb, t * nh * nh);
  f(b.sub_in, t * D);
  f(b.h, t * D);
  f(b.y, t * D);
  f(b.qr, t * c.q_lora_rank);
  f(b.q, t * c.q_dim());
  f(b.kv_row, t * HD);
  f(b.ck, t * 2 * HD);
  f(b.cs, t * 2 * HD);
  f(b.ik, t * 2 * std::max<size_t>(ID, 1));
  f(b.is, t * 2 * std::max<size_t>(ID, 1));
  f(b.iq, t * std::max<size_t>(c.indexer_q_dim(), 1));
  f(b.iw, t * std::max<size_t>(c.n_indexer_head, 1));
  f(b.attn, t * c.q_dim());
  f(b.low, t * c.out_low_dim());
  f(b.router_logits, t * E);
  f(b.probs, t * E);
  f(b.sel_w, t * U);
  f(b.gate, t * U * FF);
  f(b.up, t * U * FF);
  f(b.mid, t * U * FF);
  f(b.down, t * U * D);
  f(b.sh_gate, t * FF);
  f(b.sh_up, t * FF);
  f(b.sh_mid, t * FF);
  f(b.sh_down, t * D);
  f(b.head_pre, t * nh);
  f(b.z, t * D);
  f(b.sel, t * U);
  f(b.order, t * U);
  f(b.cnt, E);
  f(b.list, E * t * U);
  f(b.act, max_act_bytes * t * std::max<size_t>({U, c.n_out_group, 1}));
  f(b.top_k, t * std::max<size_t>(c.indexer_top_k, 1));
  f(b.pooled, (t / 4 + 2) * std::max(HD, ID));
}

}  // namespace

int CudaForward::default_batch_tokens() {
  const char* b = std::getenv("DS4_CUDA_BATCH");
  return b ? std::max(1, std::atoi(b)) : kDefaultBatchTokens;
}

uint64_t CudaForward::batch_scratch_bytes(const model::Config& c, uint64_t max_act_bytes, int batch_tokens) {
  uint64_t bytes = 0;
  Batch none;
  each_batch_array(none, c, max_act_bytes, static_cast<size_t>(std::max(batch_tokens, 1)), [&](auto& arr, size_t n) {
    bytes += n * sizeof(*arr.get());
  });
  return bytes + 2 * kAttScratchFloats * sizeof(float);  // + the attention's and indexer's scores, at most
}

void CudaForward::eval_batched(std::span<const int32_t> tokens, int64_t pos0, std::span<float> last_logits,
                               std::span<float> all_logits) {
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t T = std::min<int64_t>(batch_tokens_, n);
  if (!batch_ || batch_->h.size() < static_cast<size_t>(T) * c_.n_embd) {
    batch_.reset();  // free the smaller scratch first
    auto b = std::make_unique<Batch>();
    each_batch_array(*b, c_, dw_.max_act_bytes, static_cast<size_t>(T), [](auto& arr, size_t n) {
      arr = std::remove_reference_t<decltype(arr)>(n, false);
    });
    batch_ = std::move(b);
  }
  const size_t V = c_.n_vocab;
  if (!all_logits.empty() && batch_->logits.size() < static_cast<size_t>(T) * V)
    batch_->logits = DeviceArray<float>(static_cast<size_t>(T) * V, false);
  for (int64_t t0 = 0; t0 < n; t0 += T) {
    const int m = static_cast<int>(std::min(T, n - t0));
    float* all = all_logits.empty() ? nullptr : &all_logits[t0 * V];
    float* last = t0 + m == n && !last_logits.empty() ? last_logits.data() : nullptr;
    batch_chunk(pos0 + t0, m, all, last);
  }
}

void CudaForward::batch_chunk(int64_t pos0, int n, float* all_logits, float* last_logits) {
  // Host copies of the counters, as step() keeps them, after the chunk's last position.
  const int64_t end = pos0 + n;
  for (DevLayerKv& L : kv_) {
    if (!L.ratio) continue;
    if (static_cast<int64_t>(L.comp_tokens) != pos0)
      fail("CUDA compressor: position {} out of order, expected {}", pos0, L.comp_tokens);
    L.comp_tokens = static_cast<uint32_t>(end);
    L.n_comp = end / L.ratio;
    if (L.ratio == 4) {
      L.index_tokens = static_cast<uint32_t>(end);
      L.n_index = end / 4;
    }
  }
  StreamGuard guard(stream_);
  Batch& b = *batch_;
  if (pprof_) {
    check(cudaStreamSynchronize(stream_), "prefill profile");
    pprof_->last = std::chrono::steady_clock::now();
    pprof_->tokens += n;
  }
  const int64_t D = c_.n_embd, hc = static_cast<int64_t>(c_.hc_dim());
  const int nh = static_cast<int>(c_.n_hc);
  embed(dw_.token_embd.data, dw_.token_embd.type, dw_.token_embd.row_bytes, tokens_.get(), positions_.get() + pos0,
        nh, D, b.x.get(), n);
  pmark(0);
  for (uint32_t il = 0; il < c_.n_layer; ++il) {
    batch_attention(il, pos0, n);
    batch_ffn(il, pos0, n);
  }
  // Output head (spec §3.6) of every token (all_logits) or of the last one.
  const size_t V = c_.n_vocab;
  const int first = all_logits ? 0 : n - 1;
  if (all_logits || last_logits) {
    batch_hc_norm_mv(dw_.output_hc_fn, b.x.get() + first * hc, n - first, b.head_pre.get() + first * nh);
    hc_output(b.head_pre.get() + first * nh, dw_.output_hc_scale.get(), dw_.output_hc_base.get(), nh, c_.hc_eps,
              b.x.get() + first * hc, D, b.z.get() + first * D, n - first);
    rms_norm(b.z.get() + first * D, dw_.output_norm.get(), b.z.get() + first * D, D, n - first, c_.rms_eps);
  }
  if (all_logits) {
    mm("output", dw_.output, b.z.get(), D, n, b.logits.get());
    check(cudaMemcpyAsync(all_logits, b.logits.get(), static_cast<size_t>(n) * V * sizeof(float),
                          cudaMemcpyDeviceToHost, stream_),
          "logits copy");
    check(cudaStreamSynchronize(stream_), "prefill chunk");
    if (last_logits) std::copy_n(all_logits + static_cast<size_t>(n - 1) * V, V, last_logits);
  } else if (last_logits) {
    mv(dw_.output, b.z.get() + (n - 1) * D, logits_.get());
    check(cudaMemcpyAsync(last_logits, logits_.get(), V * sizeof(float), cudaMemcpyDeviceToHost, stream_),
          "logits copy");
    check(cudaStreamSynchronize(stream_), "prefill chunk");
  }
  check(cudaGetLastError(), "prefill chunk");
  pmark(4);
}

void CudaForward::chunk_compress(const float* ck, const float* cs, const DeviceArray<float>& ape,
                                 const DeviceArray<float>& norm, bool indexer, uint32_t r, int64_t pos0, int n,
                                 DeviceArray<float>& state_kv, DeviceArray<float>& state_score,
                                 DeviceArray<float>& rows) {
  const int64_t d = indexer ? c_.indexer_head_dim : c_.head_dim;
  compressor_chunk(ck, cs, ape.get(), d, r, positions_.get() + pos0, pos0, n, state_kv.get(), state_score.get(),
                   norm.get(), c_.rms_eps, rope_comp_.get(), n_pair_, indexer, d - c_.n_rot, batch_->pooled.get(),
                   rows.get());
}

void CudaForward::batch_hc_pre(int n, const DevMatrix& fn, const DeviceArray<float>& scale,
                               const DeviceArray<float>& base, const DeviceArray<float>& norm) {
  Batch& b = *batch_;
  const int64_t D = c_.n_embd;
  const int nh = static_cast<int>(c_.n_hc);
  pop("hc_norm_matvec", [&] { batch_hc_norm_mv(fn, b.x.get(), n, b.mix.get()); });
  hc_sinkhorn(b.mix.get(), scale.get(), base.get(), nh, static_cast<int>(c_.hc_sinkhorn_iter), c_.hc_eps,
              b.post.get(), b.comb.get(), n);
  hc_pre_weights(b.mix.get(),
                 hc_pre_args(scale.get(), base.get(), nh, c_.hc_eps, b.x.get(), D, b.pre.get(), b.sub_in.get(),
                             norm.get(), c_.rms_eps, b.h.get(), nullptr, nullptr),
                 n);
}

void CudaForward::batch_hc_norm_mv(const DevMatrix& fn, const float* x, int n, float* out) {
  const int64_t hc = static_cast<int64_t>(c_.hc_dim());
  if (hc_norm_matvec_batch(fn.type, fn.data, fn.row_bytes, fn.rows, fn.cols, x, c_.rms_eps,
                           batch_->hc_scale.get(), out, n))
    return;
  for (int t = 0; t < n; ++t) hc_norm_mv(fn, x + t * hc, out + t * fn.rows);  // fails with the reason
}

void CudaForward::batch_attention(uint32_t il, int64_t pos0, int n) {
  const DevLayer& L = dw_.layers[il];
  DevLayerKv& kv = kv_[il];
  Batch& b = *batch_;
  const int64_t D = c_.n_embd, HD = c_.head_dim, QL = c_.q_lora_rank, QD = c_.q_dim();
  const int nhead = static_cast<int>(c_.n_head), nh = static_cast<int>(c_.n_hc);
  const uint32_t ratio = kv.ratio;
  const float* rope = ratio ? rope_comp_.get() : rope_dense_.get();

  batch_hc_pre(n, L.hc_attn_fn, L.hc_attn_scale, L.hc_attn_base, L.attn_norm);  // h = attn_norm(sub_in)
  pmark(0);
  // Token-independent projections over the chunk (spec §3.4.1-2, §3.4.5, §3.4.7).
  mm("attn_q_a", L.attn_q_a, b.h.get(), D, n, b.qr.get());
  mm("attn_kv", L.attn_kv, b.h.get(), D, n, b.kv_row.get());
  rms_norm(b.qr.get(), L.attn_q_a_norm.get(), b.qr.get(), QL, n, c_.rms_eps);
  mm("attn_q_b", L.attn_q_b, b.qr.get(), QL, n, b.q.get());
  const int64_t ID = c_.indexer_head_dim, IQ = static_cast<int64_t>(c_.indexer_q_dim());
  const int IH = static_cast<int>(c_.n_indexer_head);
  if (ratio) {
    mm("comp_kv", L.comp_kv, b.h.get(), D, n, b.ck.get());
    mm("comp_gate", L.comp_gate, b.h.get(), D, n, b.cs.get());
  }
  const bool any_indexer = ratio == 4 && (pos0 + n) / 4 > static_cast<int64_t>(c_.indexer_top_k);
  if (ratio == 4) {
    mm("idx_comp_kv", L.idx_comp_kv, b.h.get(), D, n, b.ik.get());
    mm("idx_comp_gate", L.idx_comp_gate, b.h.get(), D, n, b.is.get());
    if (any_indexer) {
      mm("idx_q_b", L.idx_q_b, b.qr.get(), QL, n, b.iq.get());
      mm("idx_proj", L.idx_proj, b.h.get(), D, n, b.iw.get());
    }
  }
  pmark(1);
  // Token by token, in order: KV store, compressor pushes, indexer selection, attention.
  const int64_t* pos_all = positions_.get() + pos0;
  norm_rope(b.q.get(), nullptr, HD, nhead, c_.rms_eps, rope, n_pair_, pos_all, 0, nullptr, 0, n);  // q heads
  if (any_indexer) {  // the indexer queries' RoPE and QAT (used by the tokens that select)
    indexer_rope_qat(b.iq.get(), IH, ID, rope, n_pair_, pos_all, n);
  }
  int64_t max_rows = c_.n_swa;
  if (ratio) max_rows += std::min<int64_t>(ctx_ / ratio + 2, ratio == 4 ? c_.indexer_top_k : INT64_MAX);
  pmark(0);
  // The chunk's KV rows (normed, rotated and rounded as the ring holds them, one launch), its
  // compressor pushes, the indexer's top-k; then the attention of the whole chunk (window rows of
  // this chunk read from kv_row, older ones from the ring, compressed rows bounded by each
  // token's position), then the ring store of the chunk's rows.
  const int64_t K = c_.indexer_top_k;
  pop("loop: kv norm_rope (chunk)", [&] {
    kv_norm_rope_rows(b.kv_row.get(), L.attn_kv_a_norm.get(), HD, c_.rms_eps, rope, n_pair_, pos_all, c_.nope_dim(), n);
  });
  if (ratio)
    pop("compressor (chunk)", [&] {
      chunk_compress(b.ck.get(), b.cs.get(), L.comp_ape, L.comp_norm, false, ratio, pos0, n, kv.comp_kv, kv.comp_score,
                     kv.comp);
    });
  if (ratio == 4)
    pop("indexer compressor (chunk)", [&] {
      chunk_compress(b.ik.get(), b.is.get(), L.idx_comp_ape, L.idx_comp_norm, true, ratio, pos0, n, kv.index_kv,
                     kv.index_score, kv.index);
    });
  // The indexer (ratio 4, tokens past top_k compressed rows: (p + 1) / 4 > K from token
  // first_sel on): every token's scores against its rows, then its top-k, in launches of at most
  // kAttScratchFloats score floats.
  int first_sel = n;
  if (ratio == 4) first_sel = static_cast<int>(std::clamp<int64_t>(4 * (K + 1) - 1 - pos0, 0, n));
  if (first_sel < n) {
    const int64_t max_idx = ctx_ / 4 + 2;
    const int per_i = static_cast<int>(std::clamp<int64_t>(kAttScratchFloats / max_idx, 1, n - first_sel));
    if (b.iscores.size() < static_cast<size_t>(per_i * max_idx))
      b.iscores = DeviceArray<float>(static_cast<size_t>(per_i * max_idx), false);
    for (int t0 = first_sel; t0 < n; t0 += per_i) {
      const int m = std::min(per_i, n - t0);
      pop("indexer scores (chunk)", [&] {
        indexer_scores_batch(b.iq.get() + t0 * IQ, b.iw.get() + t0 * IH, IH, ID, kv.index.get(), pos_all + t0, 4,
                             max_idx, b.iscores.get(), m);
      });
      pop("indexer top-k (chunk)", [&] {
        indexer_top_k_batch(b.iscores.get(), pos_all + t0, 4, max_idx, K, b.top_k.get() + t0 * K, m);
      });
    }
  }
  // Attention in launches of at most kAttScratchFloats score floats: tokens [0, first_sel) over
  // all their compressed rows, [first_sel, n) over their selected rows.
  const int64_t per_tok = attention_scratch_floats(nhead, max_rows);
  const int per = static_cast<int>(std::clamp<int64_t>(kAttScratchFloats / per_tok, 1, n));
  if (b.att.size() < static_cast<size_t>(per * per_tok)) b.att = DeviceArray<float>(static_cast<size_t>(per * per_tok), false);
  for (int t0 = 0; t0 < n;) {
    const bool selects = t0 >= first_sel;
    const int m = std::min(per, (selects ? n : first_sel) - t0);
    pop(ratio == 0 ? "loop: attention (window)" : ratio == 4 ? "loop: attention (ratio 4)" : "loop: attention (ratio 128)",
        [&] {
          sink_attention_batch(b.q.get() + t0 * QD, QD, L.attn_sinks.get(), nhead, HD, kv.raw.get(), raw_cap_,
                               b.kv_row.get(), pos0, c_.n_swa, pos_all + t0, kv.comp.get(), ratio,
                               selects ? b.top_k.get() + t0 * K : nullptr, K, selects ? K : 0, max_rows, b.att.get(),
                               b.attn.get() + t0 * QD, QD, m);
        });
    t0 += m;
  }
  pop("loop: kv ring store", [&] { kv_ring_store(b.kv_row.get(), HD, pos_all, kv.raw.get(), raw_cap_, n); });
  pmark(3);
  rope_tail(b.attn.get(), nhead, HD, rope, n_pair_, pos_all, true, n);  // inverse RoPE at each query position
  pmark(0);
  // Grouped low-rank output projection (spec §3.4.9): group g of token t reads its heads' slice
  // (input row t*G + g of GI values), writes low[t][g*OL ..].
  const int64_t GI = c_.group_in_dim(), OL = c_.o_lora_rank, LOW = c_.out_low_dim();
  const int G = static_cast<int>(c_.n_out_group);
  if (GI * G != QD) fail("CUDA prefill: {} output groups of {} do not cover the {} attention values", G, GI, QD);
  const MatmatOp o = grouped_matmat_op(L.attn_output_a, OL, G, n, b.attn.get(), GI, b.low.get(), LOW, b.act.get());
  pop("attn_output_a", [&] { matmat(o); });
  mm("attn_output_b", L.attn_output_b, b.low.get(), LOW, n, b.y.get());
  pmark(1);
  hc_post(b.y.get(), b.x.get(), b.post.get(), b.comb.get(), nh, D, b.x_next.get(), n);
  std::swap(b.x, b.x_next);
}

void CudaForward::batch_ffn(uint32_t il, int64_t pos0, int n) {
  const DevLayer& L = dw_.layers[il];
  Batch& b = *batch_;
  const int64_t D = c_.n_embd, FF = c_.n_ff_exp;
  const int U = static_cast<int>(c_.n_expert_used), E = static_cast<int>(c_.n_expert), nh = static_cast<int>(c_.n_hc);
  const float clamp = c_.swiglu_clamp_of(il);

  batch_hc_pre(n, L.hc_ffn_fn, L.hc_ffn_scale, L.hc_ffn_base, L.ffn_norm);  // h = ffn_norm(sub_in)
  pmark(0);
  // Shared expert.
  mm("ffn_gate_shexp", L.ffn_gate_shexp, b.h.get(), D, n, b.sh_gate.get());
  mm("ffn_up_shexp", L.ffn_up_shexp, b.h.get(), D, n, b.sh_up.get());
  swiglu(b.sh_gate.get(), b.sh_up.get(), n, FF, clamp, nullptr, b.sh_mid.get());
  mm("ffn_down_shexp", L.ffn_down_shexp, b.sh_mid.get(), FF, n, b.sh_down.get());
  // Router (spec §3.5), per token (hash rows read the token at the position).
  mm("ffn_gate_inp", L.ffn_gate_inp, b.h.get(), D, n, b.router_logits.get());
  pmark(1);
  const bool hash = c_.is_hash_layer(il);
  router(b.router_logits.get(), E, L.exp_probs_b.size() ? L.exp_probs_b.get() : nullptr,
         hash ? L.tid2eid.get() : nullptr, tokens_.get(), positions_.get() + pos0, U, c_.expert_weight_scale,
         b.probs.get(), b.sel.get(), b.sel_w.get(), b.order.get(), n);
  // Routed experts: the chunk's (token, slot) entries grouped by expert, one multi-token matvec
  // per projection over all experts at once (experts nobody chose return at once).
  pmark(0);
  const int entries = n * U;
  pop("group_by_expert", [&] { group_by_expert(b.sel.get(), entries, E, b.cnt.get(), b.list.get(), entries); });
  MatmatOp o;
  o.n_rows = o.group_rows = FF;
  o.groups = E;
  o.cnt = b.cnt.get();
  o.list = b.list.get();
  o.list_stride = entries;
  o.in_div = U;
  o.x = b.h.get();
  o.x_stride = D;
  o.n_in = n;
  o.y_stride = FF;
  o.act = b.act.get();
  o.w = &L.ffn_gate_exps;
  o.y = b.gate.get();
  pop("ffn_gate_exps", [&] { matmat(o); });
  o.w = &L.ffn_up_exps;
  o.y = b.up.get();
  o.act_ready = L.ffn_up_exps.type == L.ffn_gate_exps.type && L.ffn_up_exps.cols == L.ffn_gate_exps.cols;
  pop("ffn_up_exps", [&] { matmat(o); });
  swiglu(b.gate.get(), b.up.get(), entries, FF, clamp, b.sel_w.get(), b.mid.get());
  o.w = &L.ffn_down_exps;
  o.n_rows = o.group_rows = D;
  o.in_div = 1;
  o.x = b.mid.get();
  o.x_stride = FF;
  o.n_in = entries;
  o.y = b.down.get();
  o.y_stride = D;
  o.act_ready = false;
  pop("ffn_down_exps", [&] { matmat(o); });
  pmark(2);
  // y = (routed outputs in ascending expert id) + shared, then HC post (the decode combine).
  moe_combine_hc_post(b.down.get(), b.order.get(), U, D, b.sh_down.get(), b.x.get(), b.post.get(), b.comb.get(), nh,
                      b.x_next.get(), n);
  pmark(0);
  std::swap(b.x, b.x_next);
}

}  // namespace ds4::cuda
