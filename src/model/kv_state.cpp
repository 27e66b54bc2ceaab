#include "model/kv_state.h"

#include <algorithm>
#include <new>

#include "common/error.h"

namespace ds4::model {

RopeConfig rope_config(const Config& c) {
  RopeConfig r;
  r.n_rot = c.n_rot;
  r.freq_base = c.rope_freq_base;
  r.compress_freq_base = c.compress_rope_freq_base;
  r.scale_factor = c.rope_scale_factor;
  r.orig_ctx = c.rope_orig_ctx;
  r.beta_fast = c.rope_yarn_beta_fast;
  r.beta_slow = c.rope_yarn_beta_slow;
  return r;
}

CompressorParams compressor_params(const Config& c, uint32_t il, CompressedRowKind kind) {
  CompressorParams p;
  p.ratio = c.compress_ratio(il);
  p.head_dim = kind == CompressedRowKind::kAttention ? c.head_dim : c.indexer_head_dim;
  p.kind = kind;
  p.rope = rope_params_for_layer(rope_config(c), p.ratio);
  p.eps = c.rms_eps;
  return p;
}

KvEstimate KvState::estimate_layer(const Config& c, uint32_t il, int64_t ctx) {
  KvEstimate e;
  e.raw_cap = static_cast<uint32_t>(std::min<int64_t>(c.n_swa, std::max<int64_t>(ctx, 1)));
  e.raw_bytes = uint64_t{e.raw_cap} * c.head_dim * 4;
  const uint32_t r = c.compress_ratio(il);
  if (r == 0) return e;
  const uint64_t rows = static_cast<uint64_t>(std::max<int64_t>(ctx, 0)) / r + 2;
  const uint64_t coff = r == 4 ? 2 : 1;
  e.compressed_bytes = rows * c.head_dim * 4;
  e.frontier_bytes = 2 * (coff * r) * (coff * c.head_dim) * 4;
  if (r == 4) {
    e.compressed_bytes += rows * c.indexer_head_dim * 4;
    e.frontier_bytes += 2 * (coff * r) * (coff * c.indexer_head_dim) * 4;
  }
  return e;
}

KvEstimate KvState::estimate(const Config& c, int64_t ctx) {
  KvEstimate e;
  for (uint32_t il = 0; il < c.n_layer; ++il) {
    const KvEstimate l = estimate_layer(c, il, ctx);
    e.raw_cap = l.raw_cap;
    e.raw_bytes += l.raw_bytes;
    e.compressed_bytes += l.compressed_bytes;
    e.frontier_bytes += l.frontier_bytes;
  }
  return e;
}

KvState::KvState(const Config& c, int64_t ctx) : ctx_(ctx) {
  if (ctx < 1) fail("context size {} must be at least 1 token", ctx);
  const KvEstimate e = estimate(c, ctx);
  raw_cap_ = e.raw_cap;
  try {
    layers_.resize(c.n_layer);
    for (uint32_t il = 0; il < c.n_layer; ++il) {
      LayerKv& L = layers_[il];
      L.ratio = c.compress_ratio(il);
      L.raw.assign(size_t{raw_cap_} * c.head_dim, 0.0f);
      if (L.ratio == 0) continue;
      const size_t rows = static_cast<size_t>(ctx / L.ratio + 2);
      L.comp.reserve(rows * c.head_dim);
      L.comp_state.emplace(compressor_params(c, il, CompressedRowKind::kAttention));
      if (L.ratio == 4) {
        L.index.reserve(rows * c.indexer_head_dim);
        L.index_state.emplace(compressor_params(c, il, CompressedRowKind::kIndexer));
      }
    }
  } catch (const std::bad_alloc&) {
    fail("cannot allocate {:.1f} MiB of KV state for a context of {} tokens; use a smaller --ctx",
         static_cast<double>(e.total()) / (1 << 20), ctx);
  }
}

void KvState::reset() {
  for (LayerKv& L : layers_) {
    std::fill(L.raw.begin(), L.raw.end(), 0.0f);
    L.comp.clear();
    L.index.clear();
    if (L.comp_state) L.comp_state->reset();
    if (L.index_state) L.index_state->reset();
  }
}

}  // namespace ds4::model
