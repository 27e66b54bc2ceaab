// Compressor and lightning-indexer kernels (spec §3.4.5-§3.4.7, model/compressor, model/indexer):
// frontier store and emission, indexer QAT, scores and the top-k selection. Same operation order
// as the CPU units.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"
#include "common/error.h"

namespace ds4::cuda {
namespace {

// One block per row, the row staged in shared memory (dim floats).
// Row blockIdx.x of x: with `table`, first rope_kernel's tail RoPE at pos[row / heads] (rope_pair,
// sign +1, on the copy in shared memory), then the QAT.
__global__ void indexer_qat_kernel(float* x, int64_t dim, const float* table, int n_pair, const int64_t* pos,
                                   int heads) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ float qat_smem[];
  float* row = x + blockIdx.x * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) qat_smem[i] = row[i];
  __syncthreads();
  if (table) {  // uniform
    const float* cs = table + pos[blockIdx.x / heads] * 2 * n_pair;
    for (int p = threadIdx.x; p < n_pair; p += blockDim.x) rope_pair(qat_smem + dim - 2 * n_pair, cs, n_pair, p, 1.0f);
    __syncthreads();
  }
  block_qat_row(qat_smem, dim);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) row[i] = qat_smem[i];
}

// model::compressor_pool of column j, frontier row r's values read through kvf(r, c), scf(r, c)
// (ratio 4: rows 0..3 the previous group at column c = j, rows 4..7 the current one at d + j).
template <class KvF, class ScF>
__device__ float pool_frontier(uint32_t ratio, int64_t d, int64_t j, KvF kvf, ScF scf) {
  constexpr float kEmpty = -1.0e30f;
  constexpr float kAllEmpty = kEmpty * 0.5f;
  float max_score = kEmpty, denom = 0.0f, sum = 0.0f;
  if (ratio == 4) {
    for (int r = 0; r < 4; ++r) {
      max_score = fmaxf(max_score, scf(r, j));
      max_score = fmaxf(max_score, scf(4 + r, d + j));
    }
    if (max_score <= kAllEmpty) return 0.0f;
    for (int r = 0; r < 4; ++r) {
      const float wp = exp_f(scf(r, j) - max_score);
      const float wc = exp_f(scf(4 + r, d + j) - max_score);
      denom += wp + wc;
      sum += wp * kvf(r, j);
      sum += wc * kvf(4 + r, d + j);
    }
  } else {
    for (uint32_t r = 0; r < ratio; ++r) max_score = fmaxf(max_score, scf(r, j));
    if (max_score <= kAllEmpty) return 0.0f;
    for (uint32_t r = 0; r < ratio; ++r) {
      const float w = exp_f(scf(r, j) - max_score);
      denom += w;
      sum += w * kvf(r, j);
    }
  }
  return denom > 0.0f ? sum / denom : 0.0f;
}

// model::compressor_pool of column j of the frontier held in state rows kv, sc [rows][width].
__device__ float pool_value(const float* kv, const float* sc, uint32_t ratio, int64_t d, int64_t j) {
  const int64_t width = (ratio == 4 ? 2 : 1) * d;
  return pool_frontier(
      ratio, d, j, [&](int64_t r, int64_t c) { return kv[r * width + c]; },
      [&](int64_t r, int64_t c) { return sc[r * width + c]; });
}

constexpr int kMaxQatDim = 1024;  // indexer rows up to this size are quantized in shared memory

// The emission after pooling (model::Compressor::push, spec §3.4.5/§3.4.7), by one block: RMS-norm
// the pooled `row` [d] with `norm`, rotate its tail at the row's first position (p + 1 - ratio),
// quantize (FP8 on the first n_fp8 values, or the indexer's Hadamard + FP4), round to f16 into
// row (p + 1) / ratio - 1 of `rows`.
__device__ void emit_finish(float* row, int64_t d, const float* norm, float eps, const float* rope_table, int n_pair,
                            bool indexer, int64_t n_fp8, int64_t p, uint32_t ratio, float* rows) {
  const float s = block_rms_scale(row, d, eps);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) row[j] = row[j] * s * norm[j];
  __syncthreads();
  const float* cs = rope_table + (p + 1 - ratio) * 2 * n_pair;
  for (int k = threadIdx.x; k < n_pair; k += blockDim.x) rope_pair(row + d - 2 * n_pair, cs, n_pair, k, 1.0f);
  __syncthreads();
  if (indexer) {
    __shared__ float qbuf[kMaxQatDim];
    if (d <= kMaxQatDim) {
      for (int64_t j = threadIdx.x; j < d; j += blockDim.x) qbuf[j] = row[j];
      __syncthreads();
      block_qat_row(qbuf, d);
      for (int64_t j = threadIdx.x; j < d; j += blockDim.x) row[j] = qbuf[j];
    } else if (threadIdx.x == 0) {
      qat_row(row, d);
    }
  } else {
    block_round_trip<true>(row, n_fp8, 64);
  }
  __syncthreads();
  float* out = rows + ((p + 1) / ratio - 1) * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) out[j] = __half2float(__float2half_rn(row[j]));
}

// dst_kv[i] = src_kv[i] and dst_sc[i] = src_sc[i] (+ add[i] when add is set) for i < n, by the
// whole block, kPushBatch values per thread at a time with every load issued before the first
// store (in-order issue would otherwise wait one memory round trip per value). The source and
// destination ranges must not overlap.
constexpr int kPushBatch = 8;
__device__ void copy_pair_batched(int64_t n, const float* src_kv, const float* src_sc, const float* add,
                                  float* dst_kv, float* dst_sc) {
  for (int64_t i0 = threadIdx.x; i0 < n; i0 += kPushBatch * static_cast<int64_t>(blockDim.x)) {
    float k[kPushBatch], v[kPushBatch];
#pragma unroll
    for (int u = 0; u < kPushBatch; ++u) {
      const int64_t i = i0 + u * static_cast<int64_t>(blockDim.x);
      k[u] = i < n ? src_kv[i] : 0.0f;
      v[u] = i >= n ? 0.0f : add ? src_sc[i] + add[i] : src_sc[i];
    }
#pragma unroll
    for (int u = 0; u < kPushBatch; ++u) {
      const int64_t i = i0 + u * static_cast<int64_t>(blockDim.x);
      if (i < n) {
        dst_kv[i] = k[u];
        dst_sc[i] = v[u];
      }
    }
  }
}

// Compressor push (model::Compressor::push), one block: the store (the APE row p % ratio added to
// the score; kv / score written to frontier row 4 + p % 4 for ratio 4, else p % ratio), then,
// when (p + 1) % ratio == 0, the emission: pool the frontier into `row`, emit_finish, and for
// ratio 4 shift the current lane of the frontier into the previous one. The block's barrier
// makes its own global stores visible to the pooling reads.
__global__ void compressor_push_kernel(const float* kv_in, const float* score_in, const float* ape, float* kv,
                                       float* sc, uint32_t ratio, int64_t d, const float* norm, float eps,
                                       const float* rope_table, int n_pair, bool indexer, int64_t n_fp8,
                                       const int64_t* pos, float* row, float* rows) {
  pdl_wait();
  pdl_trigger();
  const int64_t p = *pos;
  const int64_t width = (ratio == 4 ? 2 : 1) * d;
  const int64_t state_row = ratio == 4 ? 4 + p % 4 : p % ratio;
  copy_pair_batched(width, kv_in, score_in, ape + (p % ratio) * width, kv + state_row * width, sc + state_row * width);
  if ((p + 1) % ratio != 0) return;  // uniform
  __syncthreads();
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) row[j] = pool_value(kv, sc, ratio, d, j);
  __syncthreads();
  emit_finish(row, d, norm, eps, rope_table, n_pair, indexer, n_fp8, p, ratio, rows);
  const int64_t n = 8 * d;  // rows 4..7 into rows 0..3 (each of width 2 d): disjoint
  if (ratio == 4) copy_pair_batched(n, kv + n, sc + n, nullptr, kv, sc);
}

// A prefill chunk's compressor pushes (positions pos0 .. pos0 + n_tok - 1), computed directly
// instead of replayed token by token: the frontier row of any position q is its chunk input
// (kv_in, and score_in + ape as compressor_push_kernel adds them) when q >= pos0, else the
// state row holding it at the chunk's start (ratio 4: the group in progress in rows 4 + q % 4,
// the group before it, already shifted, in rows q % 4; ratio 128: row q % 128).
struct ChunkFrontier {
  const float *kv_in, *score_in, *ape, *state_kv, *state_sc;
  int64_t width, pos0;
  uint32_t ratio;

  __device__ int64_t state_row(int64_t q) const {
    const int64_t g = ratio;
    const int64_t m = ((q % g) + g) % g;  // q may be negative: the initial empty group
    if (ratio != 4) return m;
    const int64_t gq = (q - m) / g, g0 = pos0 >= 0 ? pos0 / g : 0;
    return gq == g0 ? 4 + m : m;
  }
  __device__ float kv(int64_t q, int64_t c) const {
    return q >= pos0 ? kv_in[(q - pos0) * width + c] : state_kv[state_row(q) * width + c];
  }
  __device__ float sc(int64_t q, int64_t c) const {
    const int64_t m = ((q % ratio) + ratio) % ratio;
    return q >= pos0 ? score_in[(q - pos0) * width + c] + ape[m * width + c] : state_sc[state_row(q) * width + c];
  }
};

// Emission blockIdx.y (position p, the chunk's e-th with (p + 1) % ratio == 0), column j: its
// pooled value into pooled[e * d + j]. Frontier row r holds position p - (rows - 1) + r
// (rows = 8 for ratio 4, ratio otherwise).
__global__ void compressor_chunk_pool_kernel(ChunkFrontier f, int64_t d, float* pooled) {
  pdl_wait();
  pdl_trigger();
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= d) return;
  const int64_t p = (f.pos0 / f.ratio + blockIdx.y + 1) * f.ratio - 1;
  const int64_t first = p - ((f.ratio == 4 ? 8 : f.ratio) - 1);
  pooled[blockIdx.y * d + j] = pool_frontier(
      f.ratio, d, j, [&](int64_t r, int64_t c) { return f.kv(first + r, c); },
      [&](int64_t r, int64_t c) { return f.sc(first + r, c); });
}

// The state after the chunk, column c of [0, width): store row s holds the chunk's last position
// q with q % ratio == s (ratio 4: rows 4 + s), unchanged if none; for ratio 4, rows 0..3 hold the
// group of the chunk's last emission, unchanged if it had none. Every value is read before any
// is written (a column's rows are this thread's alone).
__global__ void compressor_chunk_state_kernel(ChunkFrontier f, int n_tok, float* state_kv, float* state_sc) {
  pdl_wait();
  pdl_trigger();
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= f.width) return;
  const int64_t last = f.pos0 + n_tok - 1;
  const int64_t g = f.ratio;
  if (g == 4) {
    const int64_t ge = (last + 1) / 4 - 1;  // the last emitted group, if it ends in the chunk
    const bool emitted = 4 * ge + 3 >= f.pos0;
    float k[8], s[8];
    for (int r = 0; r < 4; ++r) {
      const int64_t qe = 4 * ge + r;
      k[r] = emitted ? f.kv(qe, c) : state_kv[r * f.width + c];
      s[r] = emitted ? f.sc(qe, c) : state_sc[r * f.width + c];
      const int64_t q = last - ((last - r) % 4 + 4) % 4;  // the last position with q % 4 == r
      k[4 + r] = q >= f.pos0 ? f.kv(q, c) : state_kv[(4 + r) * f.width + c];
      s[4 + r] = q >= f.pos0 ? f.sc(q, c) : state_sc[(4 + r) * f.width + c];
    }
    for (int r = 0; r < 8; ++r) {
      state_kv[r * f.width + c] = k[r];
      state_sc[r * f.width + c] = s[r];
    }
  } else {
    for (int64_t r = 0; r < g; ++r) {
      const int64_t q = last - ((last - r) % g + g) % g;
      if (q < f.pos0) continue;  // reads only chunk inputs, so writing in place is safe
      state_kv[r * f.width + c] = f.kv(q, c);
      state_sc[r * f.width + c] = f.sc(q, c);
    }
  }
}

// Emission e of the chunk whose first position is pos[0], one block each: emit_finish of pooled row e.
__global__ void compressor_chunk_finish_kernel(float* pooled, int64_t d, uint32_t ratio, const float* norm, float eps,
                                               const float* rope_table, int n_pair, bool indexer, int64_t n_fp8,
                                               const int64_t* pos, float* rows) {
  pdl_wait();
  pdl_trigger();
  const int64_t p = (pos[0] / ratio + blockIdx.x + 1) * ratio - 1;
  emit_finish(pooled + blockIdx.x * d, d, norm, eps, rope_table, n_pair, indexer, n_fp8, p, ratio, rows);
}

// Rows per shared-memory tile of indexer_scores_kernel (two tiles in flight per block).
constexpr int kScoreTile = 16;

// Indexer scores (model::indexer_scores) with kDim (8..256, a power of two) values per head.
// A block's warps cover the heads, 8 per warp and 4 lanes per head: lane j of a head holds that
// head's query values of dot8's chains 2j and 2j+1 (dims 8m + 2j, 8m + 2j + 1) in registers and
// runs those two chains over a row staged in shared memory; two xor shuffles then add the chains
// in dot8's tree ((c0 + c4) + (c1 + c5)) + ((c2 + c6) + (c3 + c7)) (float addition commutes,
// so every lane's sum is the CPU's). The head terms max(dot, 0) * (w[h] * scale) go to shared
// memory and one thread per row adds them in head order, as the CPU does. The block walks tiles
// of kScoreTile rows (grid-stride), the next tile's cp.async copy in flight during this one.
// Token blockIdx.y of a batch: q, w, pos and scores advance by q_stride, n_head, 1, s_stride.
template <int kDim>
__global__ void indexer_scores_kernel(const float* q, int64_t q_stride, const float* w, int n_head,
                                      const float* rows, const int64_t* pos, uint32_t ratio,
                                      float* scores, int64_t s_stride) {
  constexpr int kM = kDim / 8;
  pdl_wait();
  pdl_trigger();
  q += blockIdx.y * q_stride;
  w += blockIdx.y * static_cast<int64_t>(n_head);
  pos += blockIdx.y;
  scores += blockIdx.y * s_stride;
  extern __shared__ float4 score_smem[];
  float* tiles = reinterpret_cast<float*>(score_smem);  // 2 x kScoreTile x kDim
  float* terms = tiles + 2 * kScoreTile * kDim;         // kScoreTile x (n_head + 1)
  const int h = static_cast<int>(threadIdx.x / 4), j = static_cast<int>(threadIdx.x & 3);
  const bool on = h < n_head;
  const float scale = 1.0f / sqrtf(static_cast<float>(kDim * n_head));
  float2 qv[kM];
#pragma unroll
  for (int m = 0; m < kM; ++m)
    qv[m] = on ? *reinterpret_cast<const float2*>(q + static_cast<int64_t>(h) * kDim + 8 * m + 2 * j)
               : make_float2(0.0f, 0.0f);
  const float wh = on ? w[h] * scale : 0.0f;
  const int64_t n_rows = (*pos + 1) / ratio;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kScoreTile;
  auto stage = [&](float* tile, int64_t r0) {
    const int64_t n4 = (n_rows - r0 < kScoreTile ? n_rows - r0 : kScoreTile) * (kDim / 4);
    for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) cp_async16(tile + 4 * i, rows + r0 * kDim + 4 * i);
  };
  int64_t r0 = static_cast<int64_t>(blockIdx.x) * kScoreTile;
  if (r0 < n_rows) stage(tiles, r0);
  cp_async_commit();
  for (int it = 0; r0 < n_rows; ++it, r0 += step) {
    if (r0 + step < n_rows) stage(tiles + ((it + 1) & 1) * kScoreTile * kDim, r0 + step);
    cp_async_commit();
    cp_async_wait_group<1>();  // this tile's copies (the next tile's may still fly)
    __syncthreads();
    const float* tile = tiles + (it & 1) * kScoreTile * kDim;
    const int nr = static_cast<int>(n_rows - r0 < kScoreTile ? n_rows - r0 : kScoreTile);
    for (int r = 0; r < nr; ++r) {
      const float* row = tile + r * kDim + 2 * j;
      float c0 = 0.0f, c1 = 0.0f;
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        const float2 x = *reinterpret_cast<const float2*>(row + 8 * m);
        c0 += x.x * qv[m].x;
        c1 += x.y * qv[m].y;
      }
      c0 += __shfl_xor_sync(0xffffffffu, c0, 2);  // lanes 0, 1: chains (2j) + (2j + 4)
      c1 += __shfl_xor_sync(0xffffffffu, c1, 2);
      float d = c0 + c1;
      d += __shfl_xor_sync(0xffffffffu, d, 1);
      if (on && j == 0) terms[r * (n_head + 1) + h] = fmaxf(d, 0.0f) * wh;
    }
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < nr) {
      const float* t = terms + threadIdx.x * (n_head + 1);
      float sum = 0.0f;
      for (int k = 0; k < n_head; ++k) sum += t[k];
      scores[r0 + threadIdx.x] = sum;
    }
  }
}

// Top-k (model::indexer_select_top_k's order: higher score first, NaN last, lower id on ties;
// output in ascending id order), one block of kTopKThreads threads. Each score maps to a 32-bit
// key that orders like the scores (float_order_key: NaN lowest, -0 == +0). The k-th largest key T is found in
// two steps: a histogram of the scores over kTopKBins bins linear in the value between the
// finite minimum and maximum (score_bin: monotone in the key order) gives the bin holding the
// k-th largest and its rank there; that bin's keys (compacted into shared memory when they fit,
// else filtered from the scores) go through a radix select of four 8-bit passes (radix_select),
// or, up to kTopKCount of them, a count of the keys above each one (one barrier instead of the
// passes' dozen; DS4_CUDA_TOPK_COUNT=0: always the radix select).
// The rows with key > T and the first (by id) rows with key == T that complete k are then
// written in id order: each thread owns a contiguous id range, and an exclusive scan of the
// per-thread counts gives its output slots. The first step costs one pass over the scores
// with no ballots, where four radix passes over all of them were ~90 instructions per score
// and pass on one SM (ncu, 32K: 33 us).
constexpr int kTopKThreads = 1024;
constexpr int kTopKWarps = kTopKThreads / 32;
constexpr int kTopKBins = 2048;   // value bins of the first step (2 per thread)
constexpr int kTopKCount = 128;   // candidates up to which T comes from counting, not radix passes
constexpr int kTopKCand = 3072;   // the crossing bin's keys kept in shared memory (12 KiB; static
                                  // shared memory in all: 45 of the 48 KiB)

// Bin of score v: 0 for NaN and -inf, kTopKBins - 1 for +inf, finite scores 1 + floor((v - lo)
// * inv) capped at kTopKBins - 2 (lo: the finite minimum; inv >= 0). In double, v - lo neither
// overflows nor loses the order, and every step is correctly rounded, hence monotone: a larger
// key never gets a smaller bin (-0 and +0 share theirs).
__device__ __forceinline__ int score_bin(float v, double lo, double inv) {
  if (isnan(v) || v == -INFINITY) return 0;
  if (v == INFINITY) return kTopKBins - 1;
  const double f = (static_cast<double>(v) - lo) * inv;
  return 1 + (f < kTopKBins - 3 ? static_cast<int>(f) : kTopKBins - 3);
}

// The lanes of the warp with `in` set and the same 8-bit digit as this lane, by one ballot per
// digit bit (what __match_any_sync gives, without its microcoded loop). All 32 lanes call it.
__device__ __forceinline__ uint32_t digit_peers(bool in, uint32_t digit) {
  uint32_t peers = __ballot_sync(0xffffffffu, in);
#pragma unroll
  for (int b = 0; b < 8; ++b) {
    const bool bit = (digit >> b) & 1u;
    const uint32_t set = __ballot_sync(0xffffffffu, bit);
    peers &= bit ? set : ~set;
  }
  return peers;
}

// Exclusive prefix sum of v over the block (blockDim.x == kTopKThreads). A second call must
// follow a barrier after the first call's results were read (warp_sum is reused).
__device__ uint64_t block_exclusive_scan(uint64_t v) {
  __shared__ uint64_t warp_sum[kTopKWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  uint64_t inc = v;
  for (int off = 1; off < 32; off <<= 1) {
    const uint64_t o = __shfl_up_sync(0xffffffffu, inc, off);
    if (lane >= off) inc += o;
  }
  if (lane == 31) warp_sum[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    uint64_t w = warp_sum[lane];
    for (int off = 1; off < 32; off <<= 1) {
      const uint64_t o = __shfl_up_sync(0xffffffffu, w, off);
      if (lane >= off) w += o;
    }
    warp_sum[lane] = w;  // inclusive
  }
  __syncthreads();
  return (warp ? warp_sum[warp - 1] : 0) + inc - v;
}

// The rem-th largest (rem >= 1) of the keys key_of(i) of the elements i < count with in_of(i),
// by four 8-bit radix passes; returns it, and in take_eq how many keys equal to it complete
// rem (every thread gets both). Each warp counts into a histogram of its own (lanes with one
// digit add once), so warps never contend for a bin; one warp then finds the digit holding the
// rem-th key by a scan. The whole block calls it (uniform trip counts: every lane takes the
// ballots). hist: kTopKWarps x 256 words of shared memory.
template <class KeyOf, class InOf>
__device__ uint32_t radix_select(int64_t count, KeyOf key_of, InOf in_of, uint32_t rem, uint32_t* hist,
                                 uint32_t& take_eq) {
  __shared__ uint32_t total[256];
  __shared__ uint32_t s_prefix, s_remaining;
  const int t = threadIdx.x, lane = t & 31, warp = t / 32;
  uint32_t prefix = 0, mask = 0;
  if (t == 0) s_remaining = rem;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = t; i < kTopKWarps * 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
#pragma unroll 4
    for (int64_t a0 = 0; a0 < count; a0 += blockDim.x) {
      const int64_t a = a0 + t;
      const bool ok = a < count && in_of(a);
      const uint32_t key = ok ? key_of(a) : 0u;
      const bool in = ok && (key & mask) == prefix;
      const uint32_t digit = (key >> shift) & 255u;
      const uint32_t peers = digit_peers(in, digit);
      if (in && (__ffs(peers) - 1) == lane) atomicAdd(&hist[warp * 256 + digit], __popc(peers));  // the warp's own
    }
    __syncthreads();
    if (t < 256) {
      uint32_t c = 0;
      for (int w = 0; w < kTopKWarps; ++w) c += hist[w * 256 + t];
      total[t] = c;
    }
    __syncthreads();
    if (warp == 0) {  // lane l holds digits 255 - 8l down to 248 - 8l
      uint32_t c[8], sum = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) sum += (c[i] = total[255 - 8 * lane - i]);
      uint32_t inc = sum;
      for (int off = 1; off < 32; off <<= 1) {
        const uint32_t o = __shfl_up_sync(0xffffffffu, inc, off);
        if (lane >= off) inc += o;
      }
      const uint32_t r0 = s_remaining, before = inc - sum;
      const uint32_t found = __ballot_sync(0xffffffffu, before < r0 && r0 <= inc);
      const int src = found ? __ffs(found) - 1 : 31;  // (always found: the prefix holds >= r0 keys)
      if (lane == src) {
        uint32_t r = r0 - before;
        int i = 0;
        for (; i < 7 && c[i] < r; ++i) r -= c[i];
        s_remaining = r;
        s_prefix = prefix | (static_cast<uint32_t>(255 - 8 * lane - i) << shift);
      }
    }
    __syncthreads();
    prefix = s_prefix;
    mask |= 255u << shift;
  }
  take_eq = s_remaining;
  return prefix;
}

// Token blockIdx.x of a batch: s, pos and sel advance by s_stride, 1 and k.
__global__ void __launch_bounds__(kTopKThreads) top_k_kernel(const float* s, int64_t s_stride, const int64_t* pos,
                                                             uint32_t ratio, int64_t k, uint32_t* sel,
                                                             bool top_k_count_on) {
  static_assert(kTopKBins % kTopKThreads == 0 && kTopKBins <= kTopKWarps * 256, "whole bins per thread; bins in hist");
  pdl_wait();
  pdl_trigger();
  s += blockIdx.x * s_stride;
  pos += blockIdx.x;
  sel += blockIdx.x * k;
  __shared__ uint32_t hist[kTopKWarps * 256];  // the value bins, then radix_select's histograms
  __shared__ uint32_t cand[kTopKCand];
  uint32_t* bins = hist;
  __shared__ float red_lo[kTopKWarps], red_hi[kTopKWarps];
  __shared__ uint32_t s_bin, s_rem, s_ncand;
  const int64_t n = (*pos + 1) / ratio;
  const int t = threadIdx.x, lane = t & 31, warp = t / 32;
  if (n <= k) {
    for (int64_t a = t; a < n; a += blockDim.x) sel[a] = static_cast<uint32_t>(a);
    return;
  }
  // The finite minimum and maximum (exact in any order).
  float vmin = INFINITY, vmax = -INFINITY;
  for (int64_t a = t; a < n; a += blockDim.x) {
    const float v = s[a];
    if (isfinite(v)) vmin = fminf(vmin, v), vmax = fmaxf(vmax, v);
  }
  for (int off = 16; off >= 1; off >>= 1) {
    vmin = fminf(vmin, __shfl_xor_sync(0xffffffffu, vmin, off));
    vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, off));
  }
  if (lane == 0) red_lo[warp] = vmin, red_hi[warp] = vmax;
  for (int i = t; i < kTopKBins; i += blockDim.x) bins[i] = 0;
  if (t == 0) s_ncand = 0;
  __syncthreads();
  for (int w = 0; w < kTopKWarps; ++w) vmin = fminf(vmin, red_lo[w]), vmax = fmaxf(vmax, red_hi[w]);
  const double dlo = vmin, inv = vmax > vmin ? (kTopKBins - 3) / (static_cast<double>(vmax) - dlo) : 0.0;
  for (int64_t a = t; a < n; a += blockDim.x) atomicAdd(&bins[score_bin(s[a], dlo, inv)], 1u);
  __syncthreads();
  // The bin holding the k-th largest: thread t owns bins kTopKBins - 1 - kPer t - u (from the top).
  constexpr int kPer = kTopKBins / kTopKThreads;
  uint32_t c[kPer], sum = 0;
#pragma unroll
  for (int u = 0; u < kPer; ++u) sum += (c[u] = bins[kTopKBins - 1 - kPer * t - u]);
  const uint64_t before = block_exclusive_scan(sum);  // keys in the bins above
  if (before < static_cast<uint64_t>(k) && static_cast<uint64_t>(k) <= before + sum) {
    uint32_t r = static_cast<uint32_t>(k - before);
    int u = 0;
    for (; u < kPer - 1 && c[u] < r; ++u) r -= c[u];
    s_bin = kTopKBins - 1 - kPer * t - u;
    s_rem = r;
  }
  __syncthreads();
  const int bin = static_cast<int>(s_bin);
  const uint32_t rem = s_rem, n_bin = bins[bin];
  // Every key above the bin is larger than every key in it, so T is the bin's rem-th largest.
  uint32_t take, T;
  if (n_bin <= static_cast<uint32_t>(kTopKCand)) {
    for (int64_t a0 = 0; a0 < n; a0 += blockDim.x) {  // uniform trip count (ballots)
      const int64_t a = a0 + t;
      const float v = a < n ? s[a] : 0.0f;
      const bool in = a < n && score_bin(v, dlo, inv) == bin;
      const uint32_t m = __ballot_sync(0xffffffffu, in);
      uint32_t base = 0;
      if (lane == 0 && m) base = atomicAdd(&s_ncand, static_cast<uint32_t>(__popc(m)));
      base = __shfl_sync(0xffffffffu, base, 0);
      if (in) cand[base + __popc(m & ((1u << lane) - 1u))] = float_order_key(v);
    }
    __syncthreads();
    if (n_bin <= static_cast<uint32_t>(kTopKCount) && top_k_count_on) {
      // Few candidates (the usual case: ~n / kTopKBins per bin): each counts the keys above and
      // equal to its own; the one whose run of equal keys holds the rem-th largest gives T
      // (threads with an equal key write the same values).
      __shared__ uint32_t s_T, s_take;
      if (static_cast<uint32_t>(t) < n_bin) {
        const uint32_t mine = cand[t];
        uint32_t gt = 0, eq = 0;
        for (uint32_t j = 0; j < n_bin; ++j) {
          const uint32_t o = cand[j];
          gt += o > mine;
          eq += o == mine;
        }
        if (gt < rem && rem <= gt + eq) s_T = mine, s_take = rem - gt;
      }
      __syncthreads();
      T = s_T;
      take = s_take;
    } else {
      T = radix_select(
          n_bin, [&](int64_t i) { return cand[i]; }, [](int64_t) { return true; }, rem, hist, take);
    }
  } else {  // a crowded bin (ties, one outlier stretching the range): filtered from the scores
    __syncthreads();  // every thread has read n_bin before the histograms overwrite the bins
    T = radix_select(
        n, [&](int64_t i) { return float_order_key(s[i]); }, [&](int64_t i) { return score_bin(s[i], dlo, inv) == bin; },
        rem, hist, take);
  }
  const uint64_t take_eq = take;  // rows with key == T to take, lowest ids first
  const int64_t per = (n + blockDim.x - 1) / blockDim.x;
  const int64_t lo = t * per < n ? t * per : n, hi = lo + per < n ? lo + per : n;
  uint64_t gt = 0, eq = 0;
  for (int64_t a = lo; a < hi; ++a) {
    const uint32_t key = float_order_key(s[a]);
    gt += key > T;
    eq += key == T;
  }
  // One scan of both counts: gt in the high 32 bits, eq in the low (each total is <= n < 2^32).
  const uint64_t both = block_exclusive_scan((gt << 32) | eq);
  uint64_t gt_before = both >> 32, eq_before = both & 0xffffffffu;
  for (int64_t a = lo; a < hi; ++a) {
    const uint32_t key = float_order_key(s[a]);
    if (key > T) {
      sel[gt_before + (eq_before < take_eq ? eq_before : take_eq)] = static_cast<uint32_t>(a);
      ++gt_before;
    } else if (key == T) {
      if (eq_before < take_eq) sel[gt_before + eq_before] = static_cast<uint32_t>(a);
      ++eq_before;
    }
  }
}

}  // namespace

void compressor_push(const float* kv, const float* score, const float* ape, uint32_t ratio, int64_t d,
                     const int64_t* pos, float* state_kv, float* state_score, const float* norm, float eps,
                     const float* rope_table, int n_pair, bool indexer, int64_t n_fp8, float* row, float* rows) {
  launch_k(compressor_push_kernel, 1, kThreads, 0, kv, score, ape, state_kv, state_score, ratio, d, norm, eps,
           rope_table, n_pair, indexer, n_fp8, pos, row, rows);
}

void compressor_chunk(const float* kv, const float* score, const float* ape, int64_t d, uint32_t ratio,
                      const int64_t* pos, int64_t pos0, int n_tok, float* state_kv, float* state_score,
                      const float* norm, float eps, const float* rope_table, int n_pair, bool indexer, int64_t n_fp8,
                      float* pooled, float* rows) {
  if (n_tok <= 0) return;
  const int64_t width = (ratio == 4 ? 2 : 1) * d;
  const ChunkFrontier f{kv, score, ape, state_kv, state_score, width, pos0, ratio};
  const int64_t n_emit = (pos0 + n_tok) / ratio - pos0 / ratio;
  if (n_emit > 0)
    launch_k(compressor_chunk_pool_kernel, dim3(blocks_for(d), static_cast<unsigned>(n_emit)), kThreads, 0, f, d,
             pooled);
  launch_k(compressor_chunk_state_kernel, blocks_for(width), kThreads, 0, f, n_tok, state_kv, state_score);
  if (n_emit > 0)
    launch_k(compressor_chunk_finish_kernel, static_cast<unsigned>(n_emit), kThreads, 0, pooled, d, ratio, norm, eps,
             rope_table, n_pair, indexer, n_fp8, pos, rows);
}

void indexer_qat(float* x, int n_rows, int64_t dim) {
  if (n_rows <= 0) return;
  launch_k(indexer_qat_kernel, n_rows, 128, dim * sizeof(float), x, dim, static_cast<const float*>(nullptr), 0,
           static_cast<const int64_t*>(nullptr), 1);
}

void indexer_rope_qat(float* x, int n_head, int64_t dim, const float* table, int n_pair, const int64_t* pos,
                      int n_tok) {
  if (n_tok <= 0 || n_head <= 0) return;
  launch_k(indexer_qat_kernel, n_tok * n_head, 128, dim * sizeof(float), x, dim, n_pair > 0 ? table : nullptr,
           n_pair, pos, n_head);
}

namespace {

template <int kDim>
void launch_scores(dim3 grid, const float* q, int64_t q_stride, const float* w, int n_head, const float* rows,
                   const int64_t* pos, uint32_t ratio, float* scores, int64_t s_stride) {
  const size_t smem = (2 * kScoreTile * kDim + kScoreTile * (n_head + 1)) * sizeof(float);
  allow_dynamic_smem(reinterpret_cast<const void*>(indexer_scores_kernel<kDim>), smem);
  const unsigned threads = static_cast<unsigned>((n_head + 7) / 8 * 32);
  launch_k(indexer_scores_kernel<kDim>, grid, threads, smem, q, q_stride, w, n_head, rows, pos, ratio, scores,
           s_stride);
}

// grid.x blocks per token over n_tok = grid.y tokens.
void scores_dispatch(dim3 grid, const float* q, int64_t q_stride, const float* w, int n_head, int64_t dim,
                     const float* rows, const int64_t* pos, uint32_t ratio, float* scores, int64_t s_stride) {
  if (n_head < 1 || n_head > kMaxIndexerHeads)
    fail("indexer scores: {} heads outside the CUDA kernel's 1..{}", n_head, kMaxIndexerHeads);
  switch (dim) {
    case 8: return launch_scores<8>(grid, q, q_stride, w, n_head, rows, pos, ratio, scores, s_stride);
    case 16: return launch_scores<16>(grid, q, q_stride, w, n_head, rows, pos, ratio, scores, s_stride);
    case 32: return launch_scores<32>(grid, q, q_stride, w, n_head, rows, pos, ratio, scores, s_stride);
    case 64: return launch_scores<64>(grid, q, q_stride, w, n_head, rows, pos, ratio, scores, s_stride);
    case 128: return launch_scores<128>(grid, q, q_stride, w, n_head, rows, pos, ratio, scores, s_stride);
    case 256: return launch_scores<256>(grid, q, q_stride, w, n_head, rows, pos, ratio, scores, s_stride);
    default: fail("indexer scores: head dim {} is not one the CUDA kernel takes (8, 16, ..., 256)", dim);
  }
}

}  // namespace

void indexer_scores(const float* q, const float* w, int n_head, int64_t dim, const float* rows,
                    const int64_t* pos, uint32_t ratio, int64_t max_rows, float* scores) {
  const int64_t tiles = (max_rows + kScoreTile - 1) / kScoreTile;  // two blocks per SM at most
  scores_dispatch(dim3(static_cast<unsigned>(std::clamp<int64_t>(tiles, 1, 264))), q, 0, w, n_head, dim, rows, pos,
                  ratio, scores, 0);
}

void indexer_scores_batch(const float* q, const float* w, int n_head, int64_t dim, const float* rows,
                          const int64_t* pos, uint32_t ratio, int64_t max_rows, float* scores, int n_tok) {
  if (n_tok <= 0) return;
  // About four blocks per SM over all the tokens (each block loads its token's queries).
  const int64_t tiles = (max_rows + kScoreTile - 1) / kScoreTile;
  const int64_t per_tok = std::max<int64_t>(1, std::min<int64_t>(tiles, 528 / n_tok));
  scores_dispatch(dim3(static_cast<unsigned>(per_tok), static_cast<unsigned>(n_tok)), q,
                  static_cast<int64_t>(n_head) * dim, w, n_head, dim, rows, pos, ratio, scores, max_rows);
}

void indexer_top_k(const float* scores, const int64_t* pos, uint32_t ratio, int64_t max_rows, int64_t k,
                   uint32_t* sel) {
  indexer_top_k_batch(scores, pos, ratio, max_rows, k, sel, 1);  // one block: the stride is never applied
}

void indexer_top_k_batch(const float* scores, const int64_t* pos, uint32_t ratio, int64_t max_rows, int64_t k,
                         uint32_t* sel, int n_tok) {
  if (n_tok <= 0) return;
  static const bool count = !env_is_zero("DS4_CUDA_TOPK_COUNT");
  launch_k(top_k_kernel, static_cast<unsigned>(n_tok), kTopKThreads, 0, scores, max_rows, pos, ratio, k, sel, count);
}

}  // namespace ds4::cuda
