#include "backend/cpu/forward.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include <fmt/format.h>

#include "backend/cpu/parallel_steps.h"
#include "common/error.h"
#include "common/f16.h"
#include "model/experts.h"
#include "model/hyper_connections.h"
#include "model/indexer.h"
#include "model/kv_quant.h"
#include "model/norms.h"
#include "model/rope.h"
#include "model/router.h"
#include "quant/quant.h"

namespace ds4::cpu {

using model::Matrix;

namespace {

template <typename T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

void round_to_f16(std::span<float> x) {
  for (float& v : x) v = round_f16(v);
}

}  // namespace

Forward::Forward(const model::Config& config, const model::Weights& weights, int threads)
    : c_(config), w_(weights), threads_(std::max(1, threads)) {}

void Forward::resize(int64_t n) {
  if (n <= cap_) return;
  const auto N = static_cast<size_t>(n);
  const size_t hc = c_.hc_dim(), D = c_.n_embd, nh = c_.n_hc;
  grow(x_, N * hc);
  grow(x_next_, N * hc);
  grow(mix_, N * c_.hc_mix());
  grow(pre_, N * nh);
  grow(post_, N * nh);
  grow(comb_, N * nh * nh);
  grow(sub_in_, N * D);
  grow(h_, N * D);
  grow(y_, N * D);
  grow(qr_, N * c_.q_lora_rank);
  grow(q_, N * c_.q_dim());
  grow(kv_row_, N * c_.head_dim);
  grow(ck_, N * 2 * c_.head_dim);
  grow(cs_, N * 2 * c_.head_dim);
  grow(ik_, N * c_.indexer_compressor_width());
  grow(is_, N * c_.indexer_compressor_width());
  grow(iq_, N * c_.indexer_q_dim());
  grow(iw_, N * c_.n_indexer_head);
  grow(attn_, N * c_.q_dim());
  grow(low_, N * c_.out_low_dim());
  grow(router_logits_, N * c_.n_expert);
  grow(router_p_, N * c_.n_expert);
  grow(sel_, N * c_.n_expert_used);
  grow(sel_w_, N * c_.n_expert_used);
  grow(moe_, N * D);
  grow(gate_, N * c_.n_ff_exp);
  grow(up_, N * c_.n_ff_exp);
  grow(mid_, N * c_.n_ff_exp);
  grow(down_, N * D);
  grow(gather_, N * D);
  grow(gather_w_, N);
  expert_tokens_.reserve(N * c_.n_expert_used);
  cap_ = n;
}

namespace {

std::string trace_name(int il, const char* what) {
  return il < 0 ? std::string(what) : fmt::format("l{}.{}", il, what);
}

size_t shape_count(std::initializer_list<int64_t> shape) {
  return static_cast<size_t>(
      std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>()));
}

}  // namespace

void Forward::emit_f32(int64_t pos, int il, const char* what, const float* v,
                       std::initializer_list<int64_t> shape) {
  trace_->f32(pos, trace_name(il, what), {v, shape_count(shape)}, std::vector<int64_t>(shape));
}

void Forward::emit_i32(int64_t pos, int il, const char* what, const int32_t* v,
                       std::initializer_list<int64_t> shape) {
  trace_->i32(pos, trace_name(il, what), {v, shape_count(shape)}, std::vector<int64_t>(shape));
}

uint64_t Forward::decode_weight_bytes() const {
  // Everything but the embedding table and the unused routed experts.
  uint64_t bytes = w_.output.row_bytes * w_.output.rows + w_.output_hc_fn.row_bytes * w_.output_hc_fn.rows;
  auto m = [](const Matrix& x) { return x ? x.row_bytes * static_cast<uint64_t>(x.rows) : 0; };
  for (uint32_t il = 0; il < c_.n_layer; ++il) {
    const auto& L = w_.layers[il];
    bytes += m(L.hc_attn_fn) + m(L.hc_ffn_fn) + m(L.attn_q_a) + m(L.attn_q_b) + m(L.attn_kv) +
             m(L.attn_output_a) + m(L.attn_output_b) + m(L.comp_kv) + m(L.comp_gate) +
             m(L.idx_q_b) + m(L.idx_proj) + m(L.idx_comp_kv) + m(L.idx_comp_gate) +
             m(L.ffn_gate_inp) + m(L.ffn_gate_shexp) + m(L.ffn_up_shexp) + m(L.ffn_down_shexp);
    bytes += (m(L.ffn_gate_exps) + m(L.ffn_up_exps) + m(L.ffn_down_exps)) / c_.n_expert *
             c_.n_expert_used;
  }
  return bytes;
}

// HC pre for every token of the batch (spec §3.3 steps 1-5): fills pre/post/comb and sub_in.
void Forward::hc_pre(const Matrix& fn, std::span<const float> scale, std::span<const float> base,
                     int64_t n) {
  const size_t hc = c_.hc_dim(), nh = c_.n_hc, mix = c_.hc_mix(), D = c_.n_embd;
  for (int64_t t = 0; t < n; ++t)  // the HC projection's own summation order (model::hc_projection)
    model::hc_norm_projection(fn.type, fn.data, fn.row_bytes, mix, {&x_[t * hc], hc}, c_.rms_eps,
                              {&mix_[t * mix], mix});
  for (int64_t t = 0; t < n; ++t) {
    model::hc_split_sinkhorn({&mix_[t * mix], mix}, scale, base, static_cast<int>(c_.hc_sinkhorn_iter),
                             c_.hc_eps, {&pre_[t * nh], nh}, {&post_[t * nh], nh},
                             {&comb_[t * nh * nh], nh * nh});
    model::hc_weighted_sum({&x_[t * hc], hc}, {&pre_[t * nh], nh}, {&sub_in_[t * D], D});
  }
}

void Forward::eval(std::span<const int32_t> tokens, int64_t pos0, model::KvState& kv,
                   std::span<float> last_logits, std::span<float> all_logits) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) return;
  if (pos0 < 0 || pos0 + n > kv.ctx())
    fail("positions {}..{} exceed the context of {} tokens", pos0, pos0 + n - 1, kv.ctx());
  for (int32_t tok : tokens)
    if (tok < 0 || static_cast<uint32_t>(tok) >= c_.n_vocab)
      fail("token id {} is outside the vocabulary [0, {})", tok, c_.n_vocab);
  resize(n);
  const size_t hc = c_.hc_dim(), D = c_.n_embd, nh = c_.n_hc;

  // Embedding replicated into the n_hc streams (spec §3.2).
  std::vector<float> e(D);
  for (int64_t t = 0; t < n; ++t) {
    quant::dequantize_row(w_.token_embd.type, w_.token_embd.row(tokens[t]), e.data(),
                          static_cast<int64_t>(D));
    model::hc_from_embedding(e, nh, {&x_[t * hc], hc});
  }

  for (uint32_t il = 0; il < c_.n_layer; ++il) {
    attention_layer(il, tokens, pos0, kv.layers()[il], kv.raw_cap());
    ffn_layer(il, tokens, pos0);
  }

  const size_t V = c_.n_vocab;
  if (!all_logits.empty()) {
    if (all_logits.size() < static_cast<size_t>(n) * V) fail("all_logits buffer too small");
    for (int64_t t = 0; t < n; ++t) {
      output_head(t, &all_logits[t * V]);
      if (trace_) {
        const auto nhi = static_cast<int64_t>(nh);
        trace_f32(pos0 + t, -1, "out.hc_weights", head_w_.data(), {nhi});
        trace_f32(pos0 + t, -1, "out.z", head_z_.data(), {static_cast<int64_t>(D)});
        trace_f32(pos0 + t, -1, "logits", &all_logits[t * V], {static_cast<int64_t>(V)});
      }
    }
    if (!last_logits.empty())
      std::copy_n(&all_logits[(n - 1) * V], V, last_logits.begin());
  } else if (!last_logits.empty()) {
    output_head(n - 1, last_logits.data());
  }
}

void Forward::attention_layer(uint32_t il, std::span<const int32_t> tokens, int64_t pos0,
                              model::LayerKv& kv, int64_t raw_cap) {
  const auto& L = w_.layers[il];
  const auto n = static_cast<int64_t>(tokens.size());
  const size_t hc = c_.hc_dim(), D = c_.n_embd, nh = c_.n_hc;
  const size_t HD = c_.head_dim, QL = c_.q_lora_rank, QD = c_.q_dim();
  const uint32_t ratio = kv.ratio;
  const model::RopeParams rope = model::rope_params_for_layer(model::rope_config(c_), ratio);

  hc_pre(L.hc_attn_fn, L.hc_attn_scale, L.hc_attn_base, n);
  for (int64_t t = 0; t < n; ++t)
    model::rms_norm({&sub_in_[t * D], D}, L.attn_norm, {&h_[t * D], D}, c_.rms_eps);
  const int ilt = static_cast<int>(il);
  const auto nhi = static_cast<int64_t>(nh), Di = static_cast<int64_t>(D);
  const auto HDi = static_cast<int64_t>(HD), NHi = static_cast<int64_t>(c_.n_head);
  if (trace_) {
    for (int64_t t = 0; t < n; ++t) {
      trace_f32(pos0 + t, ilt, "hc_attn.pre", &pre_[t * nh], {nhi});
      trace_f32(pos0 + t, ilt, "hc_attn.post", &post_[t * nh], {nhi});
      trace_f32(pos0 + t, ilt, "hc_attn.comb", &comb_[t * nh * nh], {nhi, nhi});
      trace_f32(pos0 + t, ilt, "attn.h", &h_[t * D], {Di});
    }
  }

  // Query path (spec §3.4.1): LoRA down, RMSNorm, up, per-head RMSNorm, tail RoPE.
  matmul(L.attn_q_a, h_.data(), D, n, qr_.data(), QL, act_, threads_);
  for (int64_t t = 0; t < n; ++t) {
    std::span<float> qr{&qr_[t * QL], QL};
    model::rms_norm(qr, L.attn_q_a_norm, qr, c_.rms_eps);
  }
  matmul(L.attn_q_b, qr_.data(), QL, n, q_.data(), QD, act_, threads_);
  for (int64_t t = 0; t < n; ++t) {
    std::span<float> q{&q_[t * QD], QD};
    model::rms_norm_heads(q, HD, c_.rms_eps);
    model::rope_tail(q, HD, rope, static_cast<uint32_t>(pos0 + t), false);
    trace_f32(pos0 + t, ilt, "attn.qr", &qr_[t * QL], {static_cast<int64_t>(QL)});
    trace_f32(pos0 + t, ilt, "attn.q", q.data(), {NHi, HDi});
  }
  // KV path (spec §3.4.2): one shared row, RMSNorm, RoPE, FP8 on the non-RoPE dims.
  matmul(L.attn_kv, h_.data(), D, n, kv_row_.data(), HD, act_, threads_);
  for (int64_t t = 0; t < n; ++t) {
    std::span<float> r{&kv_row_[t * HD], HD};
    model::rms_norm(r, L.attn_kv_a_norm, r, c_.rms_eps);
    model::rope_tail(r, HD, rope, static_cast<uint32_t>(pos0 + t), false);
    model::fp8_kv_round_trip(r.first(c_.nope_dim()));
    round_to_f16(r);
    trace_f32(pos0 + t, ilt, "attn.kv", r.data(), {HDi});
  }
  // Compressor and indexer projections (spec §3.4.5, §3.4.7).
  const size_t CW = ratio ? c_.compressor_width(il) : 0;
  const size_t IW = c_.indexer_compressor_width(), IQ = c_.indexer_q_dim(), IH = c_.n_indexer_head;
  if (ratio) {
    matmul(L.comp_kv, h_.data(), D, n, ck_.data(), CW, act_, threads_);
    matmul(L.comp_gate, h_.data(), D, n, cs_.data(), CW, act_, threads_);
  }
  if (ratio == 4) {
    matmul(L.idx_comp_kv, h_.data(), D, n, ik_.data(), IW, act_, threads_);
    matmul(L.idx_comp_gate, h_.data(), D, n, is_.data(), IW, act_, threads_);
    matmul(L.idx_q_b, qr_.data(), QL, n, iq_.data(), IQ, act_, threads_);
    matmul(L.idx_proj, h_.data(), D, n, iw_.data(), IH, act_, threads_);
  }

  // Token by token: cache updates, then attention over window + visible compressed rows.
  const size_t ID = c_.indexer_head_dim;
  grow(row_, HD);
  grow(irow_, ID);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t p = pos0 + t;
    const auto pu = static_cast<uint32_t>(p);
    std::copy_n(&kv_row_[t * HD], HD, &kv.raw[static_cast<size_t>(p % raw_cap) * HD]);
    if (ratio) {
      std::span<float> s{&cs_[t * CW], CW};
      model::compressor_add_ape(s, L.comp_ape, ratio, pu);
      if (kv.comp_state->push({&ck_[t * CW], CW}, s, pu, L.comp_norm, {row_.data(), HD})) {
        round_to_f16({row_.data(), HD});
        trace_f32(p, ilt, "attn.comp_row", row_.data(), {HDi});
        kv.comp.insert(kv.comp.end(), row_.begin(), row_.begin() + static_cast<ptrdiff_t>(HD));
      }
    }
    if (ratio == 4) {
      std::span<float> s{&is_[t * IW], IW};
      model::compressor_add_ape(s, L.idx_comp_ape, ratio, pu);
      if (kv.index_state->push({&ik_[t * IW], IW}, s, pu, L.idx_comp_norm, {irow_.data(), ID})) {
        round_to_f16({irow_.data(), ID});
        trace_f32(p, ilt, "idx.comp_row", irow_.data(), {static_cast<int64_t>(ID)});
        kv.index.insert(kv.index.end(), irow_.begin(), irow_.begin() + static_cast<ptrdiff_t>(ID));
      }
    }
    // Rows this token attends to: the raw window, oldest first, then compressed rows.
    rows_.clear();
    const int64_t lo = std::max<int64_t>(0, p - static_cast<int64_t>(c_.n_swa) + 1);
    for (int64_t q = lo; q <= p; ++q) rows_.push_back(&kv.raw[static_cast<size_t>(q % raw_cap) * HD]);
    const size_t n_comp = kv.comp.size() / HD;
    if (trace_ && ratio) {
      const auto nc = static_cast<int32_t>(n_comp);
      trace_i32(p, ilt, "attn.n_comp", &nc, {});
    }
    if (ratio == 4 && n_comp > c_.indexer_top_k) {
      std::span<float> iq{&iq_[t * IQ], IQ};
      model::indexer_prepare_query(iq, ID, rope, pu);
      grow(scores_, n_comp);
      grow(selected_, n_comp);
      indexer_scores_rows(iq, {&iw_[t * IH], IH}, {kv.index.data(), n_comp * ID},
                          {scores_.data(), n_comp}, threads_);
      const size_t k = model::indexer_select_top_k({scores_.data(), n_comp}, c_.indexer_top_k,
                                                   {selected_.data(), n_comp});
      if (trace_) {
        trace_f32(p, ilt, "idx.q", iq.data(),
                  {static_cast<int64_t>(IH), static_cast<int64_t>(ID)});
        trace_f32(p, ilt, "idx.scores", scores_.data(), {static_cast<int64_t>(n_comp)});
        trace_ints_.assign(selected_.begin(), selected_.begin() + static_cast<ptrdiff_t>(k));
        trace_i32(p, ilt, "idx.selected", trace_ints_.data(), {static_cast<int64_t>(k)});
      }
      for (size_t i = 0; i < k; ++i) rows_.push_back(&kv.comp[selected_[i] * HD]);
    } else {
      for (size_t i = 0; i < n_comp; ++i) rows_.push_back(&kv.comp[i * HD]);
    }
    std::span<float> out{&attn_[t * QD], QD};
    attention_heads({&q_[t * QD], QD}, L.attn_sinks, rows_, out, scores_, threads_);
    model::rope_tail(out, HD, rope, pu, true);  // inverse RoPE with the query position (§3.4.9)
    trace_f32(p, ilt, "attn.o", out.data(), {NHi, HDi});
  }

  // Grouped low-rank output projection (spec §3.4.9): group g reads heads [g*hpg, (g+1)*hpg).
  const size_t GI = c_.group_in_dim(), OL = c_.o_lora_rank, LOW = c_.out_low_dim();
  for (uint32_t g = 0; g < c_.n_out_group; ++g)
    matmul(L.attn_output_a, static_cast<int64_t>(g * OL), static_cast<int64_t>(OL), &attn_[g * GI],
           QD, n, &low_[g * OL], LOW, act_, threads_);
  matmul(L.attn_output_b, low_.data(), LOW, n, y_.data(), D, act_, threads_);
  if (trace_) {
    for (int64_t t = 0; t < n; ++t) {
      trace_f32(pos0 + t, ilt, "attn.low", &low_[t * LOW], {static_cast<int64_t>(LOW)});
      trace_f32(pos0 + t, ilt, "attn.y", &y_[t * D], {Di});
    }
  }

  for (int64_t t = 0; t < n; ++t)
    model::hc_post({&y_[t * D], D}, {&x_[t * hc], hc}, {&post_[t * nh], nh},
                   {&comb_[t * nh * nh], nh * nh}, {&x_next_[t * hc], hc});
  std::swap(x_, x_next_);
}

void Forward::ffn_layer(uint32_t il, std::span<const int32_t> tokens, int64_t pos0) {
  const auto& L = w_.layers[il];
  const auto n = static_cast<int64_t>(tokens.size());
  const size_t hc = c_.hc_dim(), D = c_.n_embd, nh = c_.n_hc;
  const size_t E = c_.n_expert, U = c_.n_expert_used, FF = c_.n_ff_exp;
  const float clamp = c_.swiglu_clamp_of(il);

  hc_pre(L.hc_ffn_fn, L.hc_ffn_scale, L.hc_ffn_base, n);
  for (int64_t t = 0; t < n; ++t)
    model::rms_norm({&sub_in_[t * D], D}, L.ffn_norm, {&h_[t * D], D}, c_.rms_eps);
  const int ilt = static_cast<int>(il);
  const auto nhi = static_cast<int64_t>(nh), Di = static_cast<int64_t>(D);
  const auto Ei = static_cast<int64_t>(E), Ui = static_cast<int64_t>(U);
  if (trace_) {
    for (int64_t t = 0; t < n; ++t) {
      trace_f32(pos0 + t, ilt, "hc_ffn.pre", &pre_[t * nh], {nhi});
      trace_f32(pos0 + t, ilt, "hc_ffn.post", &post_[t * nh], {nhi});
      trace_f32(pos0 + t, ilt, "hc_ffn.comb", &comb_[t * nh * nh], {nhi, nhi});
      trace_f32(pos0 + t, ilt, "ffn.h", &h_[t * D], {Di});
    }
    trace_expert_out_.assign(static_cast<size_t>(n) * U * D, 0.0f);
    trace_expert_mid_.assign(static_cast<size_t>(n) * U * FF, 0.0f);
  }

  // Router (spec §3.5): sqrt(softplus) scores, hash or biased top-k selection, renormalised.
  matmul(L.ffn_gate_inp, h_.data(), D, n, router_logits_.data(), E, act_, threads_);
  for (int64_t t = 0; t < n; ++t) {
    std::span<float> p{&router_p_[t * E], E};
    std::span<int32_t> sel{&sel_[t * U], U};
    model::router_probs({&router_logits_[t * E], E}, p);
    if (c_.is_hash_layer(il))
      model::router_select_hash(L.tid2eid, tokens[t], E, sel);
    else
      model::router_select_top_k(p, L.exp_probs_b, sel);
    model::router_weights(p, sel, c_.expert_weight_scale, {&sel_w_[t * U], U});
    trace_f32(pos0 + t, ilt, "router.probs", p.data(), {Ei});
    trace_i32(pos0 + t, ilt, "router.experts", sel.data(), {Ui});
    trace_f32(pos0 + t, ilt, "router.weights", &sel_w_[t * U], {Ui});
  }

  // Routed experts, expert by expert over the tokens that chose it; each token's expert
  // outputs are added in ascending expert id, in decode and prefill alike.
  std::fill_n(moe_.begin(), static_cast<size_t>(n) * D, 0.0f);
  for (size_t e = 0; e < E; ++e) {
    expert_tokens_.clear();
    for (int64_t t = 0; t < n; ++t)
      for (size_t s = 0; s < U; ++s)
        if (static_cast<size_t>(sel_[t * U + s]) == e) expert_tokens_.push_back(t * static_cast<int64_t>(U) + static_cast<int64_t>(s));
    if (expert_tokens_.empty()) continue;
    const auto m = static_cast<int64_t>(expert_tokens_.size());
    for (int64_t i = 0; i < m; ++i) {
      const int64_t t = expert_tokens_[i] / static_cast<int64_t>(U);
      std::copy_n(&h_[t * D], D, &gather_[i * D]);
      gather_w_[i] = sel_w_[expert_tokens_[i]];
    }
    const auto row0 = static_cast<int64_t>(e * FF);
    matmul(L.ffn_gate_exps, row0, FF, gather_.data(), D, m, gate_.data(), FF, act_, threads_);
    matmul(L.ffn_up_exps, row0, FF, gather_.data(), D, m, up_.data(), FF, act_, threads_);
    for (int64_t i = 0; i < m; ++i)
      model::expert_swiglu({&gate_[i * FF], FF}, {&up_[i * FF], FF}, clamp, gather_w_[i],
                           {&mid_[i * FF], FF});
    if (trace_)
      for (int64_t i = 0; i < m; ++i)
        std::copy_n(&mid_[i * FF], FF, &trace_expert_mid_[expert_tokens_[i] * FF]);
    matmul(L.ffn_down_exps, static_cast<int64_t>(e * D), D, mid_.data(), FF, m, down_.data(), D,
           act_, threads_);
    for (int64_t i = 0; i < m; ++i) {
      const int64_t t = expert_tokens_[i] / static_cast<int64_t>(U);
      for (size_t j = 0; j < D; ++j) moe_[t * D + j] += down_[i * D + j];
      if (trace_) std::copy_n(&down_[i * D], D, &trace_expert_out_[expert_tokens_[i] * D]);
    }
  }

  // Shared expert (spec §3.5), then y = moe + shared.
  matmul(L.ffn_gate_shexp, h_.data(), D, n, gate_.data(), FF, act_, threads_);
  matmul(L.ffn_up_shexp, h_.data(), D, n, up_.data(), FF, act_, threads_);
  for (int64_t t = 0; t < n; ++t)
    model::expert_swiglu({&gate_[t * FF], FF}, {&up_[t * FF], FF}, clamp, 1.0f, {&mid_[t * FF], FF});
  if (trace_)
    for (int64_t t = 0; t < n; ++t)
      trace_f32(pos0 + t, ilt, "ffn.shared_mid", &mid_[t * FF], {static_cast<int64_t>(FF)});
  matmul(L.ffn_down_shexp, mid_.data(), FF, n, down_.data(), D, act_, threads_);
  for (int64_t t = 0; t < n; ++t)
    for (size_t j = 0; j < D; ++j) y_[t * D + j] = moe_[t * D + j] + down_[t * D + j];
  if (trace_) {
    for (int64_t t = 0; t < n; ++t) {
      trace_f32(pos0 + t, ilt, "ffn.expert_mid", &trace_expert_mid_[t * U * FF],
                {Ui, static_cast<int64_t>(FF)});
      trace_f32(pos0 + t, ilt, "ffn.expert_out", &trace_expert_out_[t * U * D], {Ui, Di});
      trace_f32(pos0 + t, ilt, "ffn.shared_out", &down_[t * D], {Di});
      trace_f32(pos0 + t, ilt, "ffn.y", &y_[t * D], {Di});
    }
  }

  for (int64_t t = 0; t < n; ++t)
    model::hc_post({&y_[t * D], D}, {&x_[t * hc], hc}, {&post_[t * nh], nh},
                   {&comb_[t * nh * nh], nh * nh}, {&x_next_[t * hc], hc});
  std::swap(x_, x_next_);
  if (trace_)
    for (int64_t t = 0; t < n; ++t) trace_f32(pos0 + t, ilt, "state", &x_[t * hc], {nhi, Di});
}

// Output head (spec §3.6): HC collapse with output_hc_*, final RMSNorm, LM head.
void Forward::output_head(int64_t t, float* logits) {
  const size_t hc = c_.hc_dim(), D = c_.n_embd, nh = c_.n_hc;
  grow(head_pre_, nh);
  grow(head_w_, nh);
  grow(head_z_, D);
  model::hc_norm_projection(w_.output_hc_fn.type, w_.output_hc_fn.data, w_.output_hc_fn.row_bytes, nh,
                            {&x_[t * hc], hc}, c_.rms_eps, {head_pre_.data(), nh});
  model::hc_output_weights({head_pre_.data(), nh}, w_.output_hc_scale, w_.output_hc_base,
                           {head_w_.data(), nh}, c_.hc_eps);
  model::hc_weighted_sum({&x_[t * hc], hc}, {head_w_.data(), nh}, {head_z_.data(), D});
  model::rms_norm({head_z_.data(), D}, w_.output_norm, {head_z_.data(), D}, c_.rms_eps);
  matmul(w_.output, head_z_.data(), D, 1, logits, c_.n_vocab, act_, threads_);
}

}  // namespace ds4::cpu
