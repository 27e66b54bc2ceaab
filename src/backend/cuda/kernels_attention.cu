// Sink attention over the window and compressed rows (spec §3.4.8, model::sink_attention): the
// scores and the softmax-weighted sum, in the CPU's operation order.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace ds4::cuda {
namespace {

// Rows attended at position *pos (model::sink_attention): the raw window [lo, pos] of at most
// n_swa rows, then the layer's compressed rows ((pos + 1) / ratio of them, none for ratio 0) or
// the n_sel rows listed in sel.
struct AttnShape {
  int64_t lo, n_win, n_rows;
};

__device__ AttnShape attn_shape(const int64_t* pos, int64_t n_swa, uint32_t ratio, const uint32_t* sel,
                                int64_t n_sel) {
  const int64_t p = *pos;
  AttnShape a;
  a.n_win = p + 1 < n_swa ? p + 1 : n_swa;
  a.lo = p + 1 - a.n_win;
  a.n_rows = a.n_win + (sel ? n_sel : (ratio ? (p + 1) / ratio : 0));
  return a;
}

// Where the window's rows live: ring `raw` (position p in row p % raw_cap), except positions >=
// chunk_pos0 when `chunk` is set (a prefill chunk's KV rows [t][dim], not yet in the ring).
struct AttnWin {
  const float* raw;
  int64_t raw_cap;
  const float* chunk;
  int64_t chunk_pos0;
};

// Whether row j of those attended at position p (shape a, no selection) was written by an
// earlier step: a window row other than p's own (the window's last), or a compressed row other
// than one emitted at p (the last when (p + 1) % ratio == 0).
__device__ __forceinline__ bool attn_row_before_step(const AttnShape& a, int64_t p, uint32_t ratio, int64_t j) {
  if (j < a.n_win) return j < a.n_win - 1;
  return ratio != 0 && j - a.n_win < p / ratio;
}

__device__ const float* attn_row(const AttnWin& w, const AttnShape& a, const float* comp, const uint32_t* sel,
                                 int64_t dim, int64_t j) {
  if (j < a.n_win) {
    const int64_t p = a.lo + j;
    if (w.chunk && p >= w.chunk_pos0) return w.chunk + (p - w.chunk_pos0) * dim;
    return w.raw + (p % w.raw_cap) * dim;
  }
  const int64_t c = j - a.n_win;
  return comp + (sel ? static_cast<int64_t>(sel[c]) : c) * dim;
}

// Attention tiles: a scores block covers 32 * kLaneRows rows x kAttHeads heads (8 lanes per row
// group, each lane kLaneRows rows of kAttLaneRegs / kLaneRows elements in registers: all its
// loads in flight at once, and each q value read from shared memory serves kLaneRows rows); a
// combine block covers kAttHeads heads x kAttDims output dims and walks the rows in chunks of
// kAttChunk (V slices, probabilities and selected row ids in shared memory).
constexpr int kAttHeads = 8, kAttLaneRegs = 64, kAttDims = 32, kAttChunk = 768;
// The decode combine's chunk on devices whose blocks get less shared memory than kAttChunk's
// ~123 KiB (99 KiB on sm_86, sm_89, sm_120): ~82 KiB. The rows are still summed in order, so the
// result is the same bit for bit.
constexpr int kAttChunkSmall = 512;
// Rows per scores lane: 1 for the decode step (more blocks for one token), kAttBatchLaneRows for
// prefill chunks (ncu, one row per lane: 91 % L1 throughput, the q reads from shared memory).
constexpr int kAttBatchLaneRows = 4;
constexpr int kAttCombineThreads = kAttHeads * 32 + 32;  // 8 output warps + 1 denominator warp
// The decode combine's block with 9 helper warps that only copy V slices and evaluate exps: each
// exp_f is a serial f64 chain, and 288 threads evaluated ~18 each for a 640-row ratio-4 layer
// (H100, perf-notes session 29: the combine ends 2.5 us sooner; DS4_CUDA_ATTN_HELPERS=0: without).
constexpr int kAttCombineMaxThreads = 2 * kAttCombineThreads;

// One row element x times the 8 heads' q values (qa: heads 0-3, qb: 4-7) into a lane's 8
// partial sums of dot8, or one V element x times the 8 heads' probabilities into their weighted
// sums (--fmad=false: each product rounded, then added).
__device__ __forceinline__ void attn_acc8(float (&acc)[kAttHeads], float4 qa, float4 qb, float x) {
  acc[0] += qa.x * x;
  acc[1] += qa.y * x;
  acc[2] += qa.z * x;
  acc[3] += qa.w * x;
  acc[4] += qb.x * x;
  acc[5] += qb.y * x;
  acc[6] += qb.z * x;
  acc[7] += qb.w * x;
}

// dot8's tree over the partial sums of the 8 lanes l = 0..7 of a row (lane 0 gets the result).
__device__ __forceinline__ float attn_dot8_tree(float s) {
  s = s + __shfl_down_sync(0xffffffffu, s, 4, 8);  // l<4: acc[l] + acc[l+4]
  s = s + __shfl_down_sync(0xffffffffu, s, 1, 8);  // l=0: (0+4)+(1+5); l=2: (2+6)+(3+7)
  s = s + __shfl_down_sync(0xffffffffu, s, 2, 8);  // l=0: the tree
  return s;
}

// Attention scores (model::sink_attention step 1) of kAttHeads heads for 32 * kLaneRows rows:
// 8 lanes per row hold dot8's partial sums; each row element is loaded once and multiplied by
// the 8 heads' q values, stored in shared memory as [dim][8] so one lane reads them as two
// float4, once for its kLaneRows rows (rows g, g + 32, ... of the block for lane group g). The
// tree and tail follow dot8, then the scale, as the CPU does. scratch is [head][row] with stride
// n_rows (this position's). Token blockIdx.z of a batch: q, pos and scratch advance by q_stride,
// 1 and scratch_stride (sel, when set, by sel_stride).
// With rows_early (attention_launches sets it only for the decode step: kLaneRows 1, one token,
// no chunk rows, no selection, raw_cap >= n_swa) the kernel loads the first 8 * kRegs elements
// of rows written by earlier steps before its PDL wait: the window's rows other than this
// position's (its ring slot held a position outside the window: raw_cap >= n_swa) and the
// compressed rows other than one emitted at this position (attn_row_before_step). Every other
// row, and q, after it; the row loads are issued before q's, so both are in flight together.
template <int kLaneRows>
__global__ void __launch_bounds__(256, kLaneRows > 1 ? 2 : 0)
attn_scores_kernel(const float* q, int64_t q_stride, int n_head, int64_t dim, AttnWin win, int64_t n_swa,
                   const int64_t* pos, const float* comp, uint32_t ratio, const uint32_t* sel, int64_t sel_stride,
                   int64_t n_sel, float* scratch, int64_t scratch_stride, bool rows_early) {
  constexpr int kRows = 32 * kLaneRows, kRegs = kAttLaneRegs / kLaneRows;
  const int l = threadIdx.x & 7;
  const int64_t full = dim / 8 * 8;
  float rv[kLaneRows][kRegs];  // the current chunk's row elements (chunk 0 possibly early)
  bool early = false;          // this lane's chunk 0 loaded before the wait
  if constexpr (kLaneRows == 1) {
    if (rows_early) {
      // pos is written before the step's first launch, rows by earlier steps.
      const AttnShape a = attn_shape(pos, n_swa, ratio, nullptr, 0);
      const int64_t jr = blockIdx.x * static_cast<int64_t>(kRows) + threadIdx.x / 8;
      early = jr < a.n_rows && attn_row_before_step(a, *pos, ratio, jr);
      if (early) {
        const float* rw = attn_row(win, a, comp, nullptr, dim, jr);
#pragma unroll
        for (int u = 0; u < kRegs; ++u) rv[0][u] = 8 * u < full ? rw[8 * u + l] : 0.0f;
      }
    }
  }
  pdl_wait();
  pdl_trigger();
  if (sel) sel += blockIdx.z * sel_stride;
  q += blockIdx.z * q_stride;
  pos += blockIdx.z;
  scratch += blockIdx.z * scratch_stride;
  extern __shared__ float4 qs4[];  // [dim][kAttHeads] floats
  float* qs = reinterpret_cast<float*>(qs4);
  const AttnShape a = attn_shape(pos, n_swa, ratio, sel, n_sel);
  if (blockIdx.x * static_cast<int64_t>(kRows) >= a.n_rows) return;  // whole block idle
  const int h0 = blockIdx.y * kAttHeads;
  int64_t j[kLaneRows];
  bool on[kLaneRows];
  const float* row[kLaneRows];
#pragma unroll
  for (int r = 0; r < kLaneRows; ++r) {
    j[r] = blockIdx.x * static_cast<int64_t>(kRows) + threadIdx.x / 8 + 32 * r;
    on[r] = j[r] < a.n_rows;
    row[r] = attn_row(win, a, comp, sel, dim, on[r] ? j[r] : 0);
  }
  auto load_chunk = [&](int64_t c) {
#pragma unroll
    for (int r = 0; r < kLaneRows; ++r)
#pragma unroll
      for (int u = 0; u < kRegs; ++u) rv[r][u] = c + 8 * u < full ? row[r][c + 8 * u + l] : 0.0f;
  };
  if (!early) load_chunk(0);  // in flight with q's loads below
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {  // the 8 heads' loads in flight together
    float v[kAttHeads];
#pragma unroll
    for (int hl = 0; hl < kAttHeads; ++hl) v[hl] = h0 + hl < n_head ? q[(h0 + hl) * dim + i] : 0.0f;
    qs4[i * 2] = make_float4(v[0], v[1], v[2], v[3]);
    qs4[i * 2 + 1] = make_float4(v[4], v[5], v[6], v[7]);
  }
  __syncthreads();
  float acc[kLaneRows][kAttHeads];
#pragma unroll
  for (int r = 0; r < kLaneRows; ++r)
#pragma unroll
    for (int hl = 0; hl < kAttHeads; ++hl) acc[r][hl] = 0.0f;
  for (int64_t c = 0; c < full; c += 8 * kRegs) {
    if (c > 0) load_chunk(c);
#pragma unroll
    for (int u = 0; u < kRegs; ++u) {
      if (c + 8 * u >= full) break;
      const int64_t i = c + 8 * u + l;
      const float4 qa = qs4[i * 2], qb = qs4[i * 2 + 1];
#pragma unroll
      for (int r = 0; r < kLaneRows; ++r) attn_acc8(acc[r], qa, qb, rv[r][u]);
    }
  }
#pragma unroll
  for (int r = 0; r < kLaneRows; ++r)
#pragma unroll
    for (int hl = 0; hl < kAttHeads; ++hl) acc[r][hl] = attn_dot8_tree(acc[r][hl]);
  if (l != 0) return;
  const float scale = 1.0f / sqrtf(static_cast<float>(dim));
#pragma unroll
  for (int r = 0; r < kLaneRows; ++r) {
    if (!on[r]) continue;
    for (int hl = 0; hl < kAttHeads && h0 + hl < n_head; ++hl) {
      float s = acc[r][hl];
      for (int64_t i = full; i < dim; ++i) s += qs[i * kAttHeads + hl] * row[r][i];
      scratch[(h0 + hl) * a.n_rows + j[r]] = s * scale;
    }
  }
}

// Multi-query scores tiles: kMqTokens tokens per block; by default kMqLaneRows2 = 2 rows per lane
// of kMqRegs2 = 8 elements per batch (128 registers; each q value read from shared memory serves
// 2 rows; 72 KiB of q for dim 512: two blocks per SM); DS4_CUDA_ATTN_MULTIQ=1: kMqLaneRows = 1
// row per lane of kMqRegs = 16 elements per batch (32 * rows per lane = rows per tile). 8 tokens x 1 row would spill at 16 elements and allow one block per SM (144 KiB of q).
// Above kMqMaxSmem of q (dim > 568) two blocks no longer fit an SM: attn_scores_kernel instead.
constexpr int kMqTokens = 4, kMqLaneRows = 1, kMqRegs = 16, kMqLaneRows2 = 2, kMqRegs2 = 8;
constexpr size_t kMqMaxSmem = 80 * 1024;
// Row tiles per block: up to kMqMaxTiles (the q fill, 64 KiB for 4 tokens x 8 heads x 512, as
// much L2 traffic as one 32-row tile's rows), one more per kMqBlocksPerTile (token group, head
// group) blocks (~1 wave of 2 blocks on 132 SMs), so short chunks keep their row-tile parallelism.
constexpr int64_t kMqMaxTiles = 4, kMqBlocksPerTile = 256;

// attn_scores_mq_kernel's shared q: token k's element i at float4 k * attn_mq_tok4(dim) + 2i +
// i/4 (heads 0-3, then 4-7 in the next float4): one float4 of padding after every 4 elements, so
// the 8 lanes of a row (elements i..i+7, i % 8 == 0) read 8 distinct 16-byte bank groups (a
// 2-way conflict without it), and each lane's q addresses are a per-lane base plus constants.
__host__ __device__ constexpr int64_t attn_mq_tok4(int64_t dim) { return 2 * dim + (dim + 3) / 4; }
__device__ __forceinline__ int64_t attn_mq_q4(int64_t dim, int k, int64_t i) {
  return k * attn_mq_tok4(dim) + 2 * i + i / 4;
}

// A multi-token block's tokens k < nt (position sp[k], AttnShape slo/snw/snr[k]) split into runs
// of consecutive positions: the run from token k0 ends before the returned token.
__device__ __forceinline__ int attn_mq_run_end(const int64_t* sp, int nt, int k0) {
  int k1 = k0 + 1;
  while (k1 < nt && sp[k1] == sp[k1 - 1] + 1) ++k1;
  return k1;
}
// The union of the rows of run k0 .. k1 - 1 (see attn_scores_mq_kernel), as an AttnShape.
__device__ __forceinline__ AttnShape attn_mq_run_union(const int64_t* sp, const int64_t* slo, const int64_t* snw,
                                                       const int64_t* snr, int k0, int k1) {
  AttnShape ua;
  ua.lo = slo[k0];
  ua.n_win = sp[k1 - 1] - ua.lo + 1;
  ua.n_rows = ua.n_win + (snr[k1 - 1] - snw[k1 - 1]);
  return ua;
}

// Attention scores of a prefill chunk without per-token selection (sel == nullptr): block
// (x, y, z) takes tokens z*kT .. z*kT + kT - 1 (fewer in the last group) x heads y*8 .. y*8 + 7
// x union rows x*tiles*kRows .. (x+1)*tiles*kRows - 1 in tiles of kRows = 32 * kR rows (q loaded
// once for them), and loads each row element once for the kT x 8 (token, head) q values (shared
// memory, attn_mq_q4), instead of once per token as attn_scores_kernel does (consecutive tokens
// share all but a few rows).
// Union of a run of consecutive positions p_a .. p_b (the group splits into such runs; normally
// one): window positions [lo(p_a), p_b] then compressed rows 0 .. (p_b + 1) / ratio - 1; union
// row u is window position lo(p_a) + u or compressed row u - (p_b - lo(p_a) + 1), its address by
// attn_row as for a token with that shape (a position's row is the same for every token). Token
// k of the run (position p_k, window [lo_k, p_k], n_win_k rows) attends window position p iff
// lo_k <= p <= p_k, as its row j = p - lo_k, and compressed row c iff c < (p_k + 1) / ratio, as
// j = n_win_k + c; its score goes to scratch + (z*kT + k) * scratch_stride + head * n_rows_k + j,
// rows it does not attend are not written. The union of a run has at most n_rows(p_b) + kT - 1
// <= max_rows + kT - 1 rows (the grid's x extent times tiles * kRows).
// Bit-identity with attn_scores_kernel: per (token, head, row) the same lane l sums the products
// q[i] * x[i] of elements i = l, l + 8, ... in increasing order from 0 (attn_acc8), the same
// tree (attn_dot8_tree), tail and scale; only the rows a block walks and the number of q values
// each loaded element meets differ.
template <int kT, int kR, int kRegs>
__global__ void __launch_bounds__(256, 2) attn_scores_mq_kernel(const float* q, int64_t q_stride, int n_head,
                                                                int64_t dim, AttnWin win, int64_t n_swa,
                                                                const int64_t* pos, const float* comp,
                                                                uint32_t ratio, float* scratch,
                                                                int64_t scratch_stride, int n_tok, int tiles) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ float4 qs4[];  // kT x attn_mq_tok4(dim) float4, see attn_mq_q4
  const float* qs = reinterpret_cast<const float*>(qs4);
  __shared__ int64_t sp[kT], slo[kT], snw[kT], snr[kT];  // each token's position and AttnShape
  constexpr int kRows = 32 * kR;
  const int t0 = static_cast<int>(blockIdx.z) * kT, nt = min(kT, n_tok - t0);
  const int h0 = blockIdx.y * kAttHeads;
  const int64_t rb = blockIdx.x * static_cast<int64_t>(tiles) * kRows, re = rb + static_cast<int64_t>(tiles) * kRows;
  if (static_cast<int>(threadIdx.x) < nt) {
    const AttnShape a = attn_shape(pos + t0 + threadIdx.x, n_swa, ratio, nullptr, 0);
    sp[threadIdx.x] = pos[t0 + threadIdx.x];
    slo[threadIdx.x] = a.lo;
    snw[threadIdx.x] = a.n_win;
    snr[threadIdx.x] = a.n_rows;
  }
  __syncthreads();
  auto run_end = [&](int k0) { return attn_mq_run_end(sp, nt, k0); };
  auto run_union = [&](int k0, int k1) { return attn_mq_run_union(sp, slo, snw, snr, k0, k1); };
  bool busy = false;
  for (int k0 = 0; k0 < nt; k0 = run_end(k0)) busy = busy || rb < run_union(k0, run_end(k0)).n_rows;
  if (!busy) return;  // whole block idle
  for (int k = 0; k < kT; ++k)
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {  // the 8 heads' loads in flight together
      float v[kAttHeads];
#pragma unroll
      for (int hl = 0; hl < kAttHeads; ++hl)
        v[hl] = k < nt && h0 + hl < n_head ? q[(t0 + k) * q_stride + (h0 + hl) * dim + i] : 0.0f;
      qs4[attn_mq_q4(dim, k, i)] = make_float4(v[0], v[1], v[2], v[3]);
      qs4[attn_mq_q4(dim, k, i) + 1] = make_float4(v[4], v[5], v[6], v[7]);
    }
  __syncthreads();
  const int l = threadIdx.x & 7;
  const int tok4 = static_cast<int>(attn_mq_tok4(dim));
  const float4* ql = qs4 + attn_mq_q4(dim, 0, l);  // element c + 8v + l of token k: ql + k*tok4 + (c + 8v)/8 * 18
  const int64_t full = dim / 8 * 8;
  const float scale = 1.0f / sqrtf(static_cast<float>(dim));
  for (int k0 = 0; k0 < nt;) {
    const int k1 = run_end(k0);
    const AttnShape ua = run_union(k0, k1);
    for (int64_t r0 = rb; r0 < ua.n_rows && r0 < re; r0 += kRows) {  // the block's tiles, q loaded once
      int64_t u[kR];
      bool on[kR];
      const float* row[kR];
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        u[r] = r0 + threadIdx.x / 8 + 32 * r;
        on[r] = u[r] < ua.n_rows;
        row[r] = attn_row(win, ua, comp, nullptr, dim, on[r] ? u[r] : 0);
      }
      float acc[kR][kT][kAttHeads];
#pragma unroll
      for (int r = 0; r < kR; ++r)
#pragma unroll
        for (int k = 0; k < kT; ++k)
#pragma unroll
          for (int hl = 0; hl < kAttHeads; ++hl) acc[r][k][hl] = 0.0f;
      for (int64_t c = 0; c < full; c += 8 * kRegs) {
        float rv[kR][kRegs];
#pragma unroll
        for (int r = 0; r < kR; ++r)
#pragma unroll
          for (int v = 0; v < kRegs; ++v) rv[r][v] = c + 8 * v < full ? row[r][c + 8 * v + l] : 0.0f;
        const float4* qc = ql + static_cast<int>(c / 8) * 18;
#pragma unroll
        for (int v = 0; v < kRegs; ++v) {
          if (c + 8 * v >= full) break;
#pragma unroll
          for (int k = 0; k < kT; ++k) {
            const float4 qa = qc[k * tok4 + 18 * v], qb = qc[k * tok4 + 18 * v + 1];
#pragma unroll
            for (int r = 0; r < kR; ++r) attn_acc8(acc[r][k], qa, qb, rv[r][v]);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kR; ++r)
#pragma unroll
        for (int k = 0; k < kT; ++k)
#pragma unroll
          for (int hl = 0; hl < kAttHeads; ++hl) acc[r][k][hl] = attn_dot8_tree(acc[r][k][hl]);
      if (l == 0) {
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          if (!on[r]) continue;
          const bool in_win = u[r] < ua.n_win;
          const int64_t p = ua.lo + u[r], cr = u[r] - ua.n_win;
#pragma unroll
          for (int k = 0; k < kT; ++k) {
            if (k < k0 || k >= k1) continue;  // another run's token (or none)
            const int64_t lo = slo[k], nw = snw[k], nr = snr[k];
            if (in_win ? p < lo || p > sp[k] : cr >= nr - nw) continue;  // a row this token does not attend
            float* out = scratch + (t0 + k) * scratch_stride + (in_win ? p - lo : nw + cr);
#pragma unroll
            for (int hl = 0; hl < kAttHeads; ++hl) {
              if (h0 + hl >= n_head) break;
              float s = acc[r][k][hl];
              for (int64_t i = full; i < dim; ++i) s += qs[attn_mq_q4(dim, k, i) * 4 + hl] * row[r][i];
              out[(h0 + hl) * nr] = s * scale;
            }
          }
        }
      }
    }
    k0 = k1;
  }
}

// Asynchronous global -> shared copies of 16 or 4 bytes; src_bytes = 0 fills zeros (reads nothing).
__device__ void attn_cp_async16(float* dst, const float* src, int src_bytes) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ void attn_cp_async4(float* dst, const float* src, int src_bytes) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}

// Issues the cp.async copies of cn V row slices, elements i0 .. i0 + kD - 1 of row_of(jj), into
// vs[jj * kD ..] (zeros past dim): 16-byte copies when vec4 (rows and the slice start 16-byte
// aligned: dim % 4 == 0), else 4-byte ones. The caller commits (or waits on) them.
template <int kD, class RowOf>
__device__ __forceinline__ void attn_stage_v(float* vs, RowOf row_of, int cn, int64_t i0, int64_t dim, bool vec4) {
  if (vec4) {
    for (int e = threadIdx.x; e < cn * (kD / 4); e += blockDim.x) {
      const int jj = e / (kD / 4), k = 4 * (e % (kD / 4));
      const bool in = i0 + k < dim;
      attn_cp_async16(vs + jj * kD + k, in ? row_of(jj) + i0 + k : row_of(jj), in ? 16 : 0);
    }
  } else {
    for (int e = threadIdx.x; e < cn * kD; e += blockDim.x) {
      const int jj = e / kD, k = e % kD;
      const bool in = i0 + k < dim;
      attn_cp_async4(vs + jj * kD + k, in ? row_of(jj) + i0 + k : row_of(jj), in ? 4 : 0);
    }
  }
}

// Dynamic shared memory of attn_combine_kernel<kChunk>: V slices [kChunk][kAttDims], probabilities
// [kAttHeads][kChunk + 1] (+1: the denominator lanes hit distinct banks), sel ids [kChunk].
constexpr size_t combine_smem(int chunk) {
  return (static_cast<size_t>(chunk) * kAttDims + kAttHeads * (chunk + 1) + chunk) * sizeof(float);
}

// The softmax of a prefill chunk's scores, once per (token, head) instead of once per combine
// block (16 output-dim slices each redid the max and every exp): warp w of block (g, t) takes
// head g*kAttHeads + w of token t, the max over its rows and the sink (exact in any order), the
// probabilities exp(s - max) in place of the scores, and the denominator exp(sink - max) + the
// probabilities in row order (each group of 32 rows broadcast lane by lane), stored at
// scratch + scratch_stride - n_head + head for attn_combine_rows_kernel.
__global__ void __launch_bounds__(kAttHeads * 32) attn_softmax_kernel(const float* sinks, int n_head, int64_t n_swa,
                                                                     const int64_t* pos, uint32_t ratio,
                                                                     const uint32_t* sel, int64_t n_sel,
                                                                     float* scratch, int64_t scratch_stride) {
  pdl_wait();
  pdl_trigger();
  const int h = blockIdx.x * kAttHeads + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (h >= n_head) return;  // whole warp
  pos += blockIdx.y;
  scratch += blockIdx.y * scratch_stride;
  const AttnShape a = attn_shape(pos, n_swa, ratio, sel, n_sel);
  float* sc = scratch + h * a.n_rows;
  float m = -INFINITY;
#pragma unroll 8
  for (int64_t j = lane; j < a.n_rows; j += 32) m = fmaxf(m, sc[j]);
  for (int off = 16; off >= 1; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  m = fmaxf(sinks[h], m);
  float denom = exp_f(sinks[h] - m);
  for (int64_t j0 = 0; j0 < a.n_rows; j0 += 32) {
    const int64_t j = j0 + lane;
    const float pv = j < a.n_rows ? exp_f(sc[j] - m) : 0.0f;
    if (j < a.n_rows) sc[j] = pv;
    const int cnt = a.n_rows - j0 < 32 ? static_cast<int>(a.n_rows - j0) : 32;
    for (int k = 0; k < cnt; ++k) denom += __shfl_sync(0xffffffffu, pv, k);
  }
  if (lane == 0) scratch[scratch_stride - n_head + h] = denom;
}

// Softmax with a sink and the weighted sum (model::sink_attention steps 2-3) of kAttHeads heads
// x kAttDims output dims, grid (dim slices, head groups); one block per SM. Per chunk of up to
// kChunk rows: the V slices of all its rows are copied into shared memory at once (cp.async,
// every load in flight together) while the block makes the probabilities exp(s - max); then warp
// w < 8 (head h0 + w, lane = output dim) sums each output value over the rows in order, every V
// element read once for the 8 heads, and warp 8's lanes sum the 8 denominators in row order.
// With max_fused and all rows in one chunk, each thread loads its scores once into registers:
// the heads' maxima are reduced from them (a warp max per head, then a shared-memory atomicMax
// seeded with the sinks) and the exps taken from the same registers; otherwise warps 0-7 take
// the maxima in a pass of their own and the exps reload the scores.
// Token blockIdx.z of a batch as attn_scores_kernel (out advances by out_stride). kChunk: rows
// per chunk (kAttChunk, or kAttChunkSmall where blocks get less shared memory; one block per SM
// for the decode step's single token). With rope_table
// set, the inverse tail RoPE at *pos (rope_kernel's rope_pair with sign -1) is applied to the
// output before it is stored: pair (2p, 2p + 1) of the tail sits in lanes (2p, 2p + 1) of a warp
// when the tail starts at an even dim, so one shuffle brings each lane its partner
// (sink_attention declines the fusion for odd dims). With out_q8 (dim % 32 == 0, so each output
// warp's 32 values are one Q8_0 block) every output warp also quantizes its values into block
// ((h0 + warp) * dim + i0) / 32 of out_q8 (quantize_q8_0_block, as the quantize kernels).
template <int kChunk, bool kHelpers = false>
__global__ void __launch_bounds__(kHelpers ? kAttCombineMaxThreads : kAttCombineThreads, 1)
attn_combine_kernel(const float* sinks, int n_head, int64_t dim, AttnWin win, int64_t n_swa, const int64_t* pos,
                    const float* comp, uint32_t ratio, const uint32_t* sel, int64_t sel_stride, int64_t n_sel,
                    const float* scratch, int64_t scratch_stride, float* out, int64_t out_stride,
                    const float* rope_table, int n_pair, uint8_t* out_q8, bool rows_early, bool max_fused) {
  constexpr int kThreads = kHelpers ? kAttCombineMaxThreads : kAttCombineThreads;
  const float* raw = win.raw;
  const int64_t raw_cap = win.raw_cap;
  extern __shared__ float4 smem4[];
  float* vs = reinterpret_cast<float*>(smem4);
  float* ps = vs + kChunk * kAttDims;
  uint32_t* sels = reinterpret_cast<uint32_t*>(ps + kAttHeads * (kChunk + 1));
  __shared__ float ms[kAttHeads], inv[kAttHeads];
  // max_fused: the heads' maxima as float_order_key, seeded with the sinks (weights: read before
  // the PDL wait) and never below -inf's key, so NaN scores and sinks are skipped as fmaxf skips them.
  __shared__ uint32_t ms_key[kAttHeads];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int h0 = blockIdx.y * kAttHeads;
  const uint32_t none = float_order_key(-INFINITY);
  if (max_fused && threadIdx.x < kAttHeads) {
    const int h = h0 + static_cast<int>(threadIdx.x);
    ms_key[threadIdx.x] = h < n_head ? max(float_order_key(sinks[h]), none) : none;
  }
  const int64_t i0 = blockIdx.x * static_cast<int64_t>(kAttDims);
  const bool vec4 = dim % 4 == 0;  // 16-byte copies (rows and the slice start 16-byte aligned)
  // The V slices of chunk c0's rows jj with want(jj) (cp.async, not yet committed); row c0 + jj
  // as attn_row gives it, without a 64-bit modulo per row.
  auto copy_rows = [&](const AttnShape& a, const uint32_t* sl, int64_t c0, int cn, auto want) {
    const int64_t slot0 = a.lo % raw_cap;
    auto row_at = [&](int jj) -> const float* {
      const int64_t r = c0 + jj;
      if (r < a.n_win && win.chunk && a.lo + r >= win.chunk_pos0) return win.chunk + (a.lo + r - win.chunk_pos0) * dim;
      if (r < a.n_win) {
        int64_t slot = slot0 + r;
        while (slot >= raw_cap) slot -= raw_cap;
        return raw + slot * dim;
      }
      return comp + (sl ? static_cast<int64_t>(sels[jj]) : r - a.n_win) * dim;
    };
    if (vec4) {
      for (int e = threadIdx.x; e < cn * (kAttDims / 4); e += blockDim.x) {
        const int jj = e / (kAttDims / 4), k = 4 * (e % (kAttDims / 4));
        if (!want(jj)) continue;
        const float* row = row_at(jj);
        const bool in = i0 + k < dim;
        attn_cp_async16(vs + jj * kAttDims + k, in ? row + i0 + k : row, in ? 16 : 0);
      }
    } else {
      for (int e = threadIdx.x; e < cn * kAttDims; e += blockDim.x) {
        const int jj = e / kAttDims, k = e % kAttDims;
        if (!want(jj)) continue;
        const float* row = row_at(jj);
        const bool in = i0 + k < dim;
        attn_cp_async4(vs + jj * kAttDims + k, in ? row + i0 + k : row, in ? 4 : 0);
      }
    }
  };
  // rows_early (as the scores kernel's): the first chunk's slices of rows written by earlier
  // steps are copied before the PDL wait (attn_row_before_step); pos is written before the
  // step's first launch.
  int64_t p_pre = 0;
  AttnShape a_pre{};
  if (rows_early) {
    p_pre = *pos;
    a_pre = attn_shape(pos, n_swa, ratio, nullptr, 0);
    const int cn = static_cast<int>(a_pre.n_rows < kChunk ? a_pre.n_rows : kChunk);
    copy_rows(a_pre, nullptr, 0, cn, [&](int jj) { return attn_row_before_step(a_pre, p_pre, ratio, jj); });
  }
  pdl_wait();
  pdl_trigger();
  if (sel) sel += blockIdx.z * sel_stride;
  pos += blockIdx.z;
  scratch += blockIdx.z * scratch_stride;
  out += blockIdx.z * out_stride;
  const AttnShape a = attn_shape(pos, n_swa, ratio, sel, n_sel);
  const int64_t n_rows = a.n_rows;
  float denom = 0.0f, o = 0.0f;
  for (int64_t c0 = 0; c0 < n_rows; c0 += kChunk) {
    const int cn = static_cast<int>(n_rows - c0 < kChunk ? n_rows - c0 : kChunk);
    __syncthreads();  // the previous chunk is consumed
    if (sel) {
      for (int jj = threadIdx.x; jj < cn; jj += blockDim.x)
        if (c0 + jj >= a.n_win) sels[jj] = sel[c0 + jj - a.n_win];
      __syncthreads();
    }
    if (rows_early && c0 == 0) copy_rows(a, sel, c0, cn, [&](int jj) { return !attn_row_before_step(a_pre, p_pre, ratio, jj); });
    else copy_rows(a, sel, c0, cn, [](int) { return true; });
    asm volatile("cp.async.commit_group;" ::: "memory");
    const bool fused = max_fused && cn == n_rows;  // one chunk: each score loaded once (block-uniform)
    if (fused) {
      constexpr int kVals = (kAttHeads * kChunk + kThreads - 1) / kThreads;
      constexpr unsigned kAll = 0xffffffffu;
      const int n_el = kAttHeads * cn;
      float sv[kVals];
#pragma unroll
      for (int u = 0; u < kVals; ++u) {
        const int e = static_cast<int>(threadIdx.x) + u * kThreads, hl = e / cn;
        sv[u] = e < n_el && h0 + hl < n_head ? scratch[(h0 + hl) * n_rows + e % cn] : 0.0f;
      }
      // Per head, the max of a warp's values (a warp's 32 elements span few heads: one pass
      // per head present), then one atomicMax on that head's key.
#pragma unroll
      for (int u = 0; u < kVals; ++u) {
        const int e = static_cast<int>(threadIdx.x) + u * kThreads, hl = e / cn;
        const bool ok = e < n_el && h0 + hl < n_head;
        const uint32_t key = float_order_key(sv[u]);
        for (unsigned left = __ballot_sync(kAll, ok); left;) {
          const int first = __ffs(static_cast<int>(left)) - 1, lh = __shfl_sync(kAll, hl, first);
          const bool mine = ok && hl == lh;
          const uint32_t m = __reduce_max_sync(kAll, mine ? key : none);
          if (lane == first) atomicMax(&ms_key[lh], m);
          left &= ~__ballot_sync(kAll, mine);
        }
      }
      __syncthreads();
      if (warp == kAttHeads && lane < kAttHeads && h0 + lane < n_head)
        denom = exp_f(sinks[h0 + lane] - float_of_order_key(ms_key[lane]));
#pragma unroll
      for (int u = 0; u < kVals; ++u) {
        const int e = static_cast<int>(threadIdx.x) + u * kThreads, hl = e / cn;
        if (e < n_el) ps[hl * (kChunk + 1) + e % cn] = h0 + hl < n_head ? exp_f(sv[u] - float_of_order_key(ms_key[hl])) : 0.0f;
      }
    } else if (c0 == 0) {  // per-head max over all rows (with the sink), one warp per head
      if (warp < kAttHeads && h0 + warp < n_head) {
        const float* sc = scratch + (h0 + warp) * n_rows;
        float m = -INFINITY;
#pragma unroll 8
        for (int64_t j = lane; j < n_rows; j += 32) m = fmaxf(m, sc[j]);
        for (int off = 16; off >= 1; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
        if (lane == 0) ms[warp] = fmaxf(sinks[h0 + warp], m);
      }
      __syncthreads();
      if (warp == kAttHeads && lane < kAttHeads && h0 + lane < n_head) denom = exp_f(sinks[h0 + lane] - ms[lane]);
    }
    constexpr int kBatch = 8;  // score loads in flight per thread before the exps
    for (int e0 = 0; !fused && e0 < kAttHeads * cn; e0 += kBatch * static_cast<int>(blockDim.x)) {
      float sv[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int e = e0 + static_cast<int>(threadIdx.x + u * blockDim.x), hl = e / cn, jj = e % cn;
        sv[u] = e < kAttHeads * cn && h0 + hl < n_head ? scratch[(h0 + hl) * n_rows + c0 + jj] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int e = e0 + static_cast<int>(threadIdx.x + u * blockDim.x), hl = e / cn, jj = e % cn;
        if (e < kAttHeads * cn) ps[hl * (kChunk + 1) + jj] = h0 + hl < n_head ? exp_f(sv[u] - ms[hl]) : 0.0f;
      }
    }
    cp_async_wait();
    __syncthreads();
    if (warp == kAttHeads) {
      if (lane < kAttHeads && h0 + lane < n_head) {
        const float* p = ps + lane * (kChunk + 1);
#pragma unroll 8
        for (int jj = 0; jj < cn; ++jj) denom += p[jj];
      }
    } else if (warp < kAttHeads) {
      const float* p = ps + warp * (kChunk + 1);
      const float* v = vs + lane;
#pragma unroll 8
      for (int jj = 0; jj < cn; ++jj) o += p[jj] * v[jj * kAttDims];
    }
  }
  if (warp == kAttHeads && lane < kAttHeads) inv[lane] = 1.0f / denom;
  __syncthreads();
  const int64_t i = i0 + lane;
  if (warp >= kAttHeads) return;  // the denominator warp
  float v = o * inv[warp];
  if (rope_table) {  // uniform; every lane of the warp takes part in the shuffle
    const float pv = __shfl_xor_sync(0xffffffffu, v, 1);
    const int64_t t0 = dim - 2 * static_cast<int64_t>(n_pair);
    if (i >= t0 && i < dim) {
      const float* cs = rope_table + *pos * 2 * n_pair;
      const int p = static_cast<int>((i - t0) / 2);
      const float c = cs[p], s = -1.0f * cs[n_pair + p];
      v = (i - t0) % 2 == 0 ? v * c - pv * s : pv * s + v * c;  // x0 c - x1 s, x0 s + x1 c
    }
  }
  if (h0 + warp < n_head && i < dim) out[(h0 + warp) * dim + i] = v;
  if (out_q8 && h0 + warp < n_head)  // uniform per warp; i < dim on every lane (dim % 32 == 0)
    quantize_q8_0_block(v, lane, reinterpret_cast<BQ8_0Act*>(out_q8) + ((h0 + warp) * dim + i0) / 32);
}

// The weighted sum of a prefill chunk's tokens after attn_softmax_kernel (probabilities in place
// of the scores, denominators after them): thread i of block (slice, head group, token) owns
// output dim slice * kCbDims + i of the group's kAttHeads heads, so each V element read from
// shared memory serves 8 heads (attn_combine_kernel's lanes read one V element and one
// probability per product: bound by shared-memory bandwidth, 1.46 ms per ratio-4 call). Rows in
// chunks of kCbChunk: the chunk's row addresses, then its V slices (cp.async) and probabilities
// [row][8] in shared memory; every output value is summed over the rows in order from +0, then
// times 1 / denominator, as attn_combine_kernel does.
constexpr int kCbDims = 128, kCbChunk = 64;

__global__ void __launch_bounds__(kCbDims) attn_combine_rows_kernel(int n_head, int64_t dim, AttnWin win,
                                                                    int64_t n_swa, const int64_t* pos,
                                                                    const float* comp, uint32_t ratio,
                                                                    const uint32_t* sel, int64_t sel_stride,
                                                                    int64_t n_sel, const float* scratch,
                                                                    int64_t scratch_stride, float* out,
                                                                    int64_t out_stride) {
  pdl_wait();
  pdl_trigger();
  if (sel) sel += blockIdx.z * sel_stride;
  pos += blockIdx.z;
  scratch += blockIdx.z * scratch_stride;
  out += blockIdx.z * out_stride;
  __shared__ __align__(16) float vs[kCbChunk * kCbDims];
  __shared__ __align__(16) float ps[kCbChunk * kAttHeads];
  __shared__ const float* rows[kCbChunk];
  const AttnShape a = attn_shape(pos, n_swa, ratio, sel, n_sel);
  const int h0 = blockIdx.y * kAttHeads;
  const int64_t i0 = blockIdx.x * static_cast<int64_t>(kCbDims);
  const bool vec4 = dim % 4 == 0;  // 16-byte copies (rows and the slice start 16-byte aligned)
  float o[kAttHeads] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t c0 = 0; c0 < a.n_rows; c0 += kCbChunk) {
    const int cn = static_cast<int>(a.n_rows - c0 < kCbChunk ? a.n_rows - c0 : kCbChunk);
    __syncthreads();  // the previous chunk is consumed
    for (int jj = threadIdx.x; jj < cn; jj += blockDim.x) rows[jj] = attn_row(win, a, comp, sel, dim, c0 + jj);
    for (int e = threadIdx.x; e < cn * kAttHeads; e += blockDim.x) {
      const int jj = e / kAttHeads, hl = e % kAttHeads;
      ps[e] = h0 + hl < n_head ? scratch[(h0 + hl) * a.n_rows + c0 + jj] : 0.0f;
    }
    __syncthreads();
    attn_stage_v<kCbDims>(vs, [&](int jj) { return rows[jj]; }, cn, i0, dim, vec4);
    cp_async_wait();
    __syncthreads();
    const float4* p4 = reinterpret_cast<const float4*>(ps);
#pragma unroll 4
    for (int jj = 0; jj < cn; ++jj) {
      const float v = vs[jj * kCbDims + threadIdx.x];
      attn_acc8(o, p4[2 * jj], p4[2 * jj + 1], v);
    }
  }
  const int64_t i = i0 + threadIdx.x;
  if (i >= dim) return;
#pragma unroll
  for (int hl = 0; hl < kAttHeads; ++hl) {
    if (h0 + hl >= n_head) break;
    const float inv = 1.0f / scratch[scratch_stride - n_head + h0 + hl];
    out[(h0 + hl) * dim + i] = o[hl] * inv;
  }
}

// Token k's row index j of union row u of its run (union ua; position p, AttnShape lo / nw / nr),
// or -1 for a row it does not attend (the mapping documented at attn_scores_mq_kernel).
__device__ __forceinline__ int64_t attn_mq_row_j(const AttnShape& ua, int64_t u, int64_t p, int64_t lo, int64_t nw,
                                                 int64_t nr) {
  if (u < ua.n_win) {
    const int64_t wp = ua.lo + u;
    return wp < lo || wp > p ? -1 : wp - lo;
  }
  const int64_t c = u - ua.n_win;
  return c < nr - nw ? nw + c : -1;
}

// Multi-token combine tiles: kCmTokens tokens per block; by default 2 output dims per thread (each
// pair of probability float4 reads serves 16 products instead of 8) with kCmChunk2 rows per chunk
// (the same 32 KiB of V slices); DS4_CUDA_ATTN_MULTIQ_COMBINE=1: 1 dim per thread, kCbChunk rows.
constexpr int kCmTokens = 4, kCmChunk2 = 32;

// attn_combine_rows_kernel for kT consecutive tokens at once (prefill chunks without per-token
// selection, after attn_softmax_kernel, whichever scores kernel ran: both leave the same
// scratch). Block (x, y, z): tokens z*kT .. z*kT + kT - 1 (fewer in the last group) x heads y*8
// .. y*8 + 7 x output dims x*kCbDims*kV .. + kCbDims*kV - 1, thread t owning dims t*kV .. t*kV +
// kV - 1 with kT x kV x 8 accumulators. The tokens split into runs of consecutive positions
// (attn_mq_run_end; normally one) and each run's union of rows (attn_mq_run_union: window
// positions ascending, then compressed rows ascending) is walked in chunks of kChunk rows: row
// addresses and a per-row mask of the run's tokens that attend it, the V slices (cp.async, each
// loaded once for all kT tokens instead of once per token), then the probabilities [row][token][8]
// read from each token's own scratch at its own row index (attn_mq_row_j; 0 where not attended).
// Each thread then adds p * v to token k's accumulators only for rows whose mask has bit k (a
// block-uniform branch: no add at all otherwise; rows all kT tokens attend skip the tests).
// Bit-identity with attn_combine_rows_kernel: a token's window is a contiguous range of the
// union's window positions and its compressed rows a prefix of the union's, so walking the union
// ascending and skipping the rest visits exactly the token's rows j = 0, 1, ... in its own order;
// each output value is o = +0, o += p * v per row (--fmad=false: product rounded, then added),
// then o * (1 / denominator), the same operations on the same values.
template <int kT, int kV, int kChunk>
__global__ void __launch_bounds__(kCbDims) attn_combine_mq_kernel(int n_head, int64_t dim, AttnWin win,
                                                                  int64_t n_swa, const int64_t* pos,
                                                                  const float* comp, uint32_t ratio,
                                                                  const float* scratch, int64_t scratch_stride,
                                                                  float* out, int64_t out_stride, int n_tok) {
  static_assert(kT < 32 && kCbDims % (kAttHeads * kT) == 0 && kChunk % (kCbDims / (kAttHeads * kT)) == 0 &&
                    (kV == 1 || kV == 2),
                "token mask bits; each thread's probabilities of one (token, head)");
  pdl_wait();
  pdl_trigger();
  constexpr int kD = kCbDims * kV;  // output dims per block
  __shared__ __align__(16) float vs[kChunk * kD];
  __shared__ __align__(16) float ps[kChunk * kT * kAttHeads];
  __shared__ const float* rows[kChunk];
  __shared__ unsigned msk[kChunk];                      // bit k: token k attends the row
  __shared__ int64_t sp[kT], slo[kT], snw[kT], snr[kT];  // each token's position and AttnShape
  const int t0 = static_cast<int>(blockIdx.z) * kT, nt = min(kT, n_tok - t0);
  const int h0 = blockIdx.y * kAttHeads;
  const int64_t i0 = blockIdx.x * static_cast<int64_t>(kD);
  if (static_cast<int>(threadIdx.x) < kT) {  // zeros past the last token (read, never used)
    const bool on = static_cast<int>(threadIdx.x) < nt;
    const AttnShape a = on ? attn_shape(pos + t0 + threadIdx.x, n_swa, ratio, nullptr, 0) : AttnShape{0, 0, 0};
    sp[threadIdx.x] = on ? pos[t0 + threadIdx.x] : 0;
    slo[threadIdx.x] = a.lo;
    snw[threadIdx.x] = a.n_win;
    snr[threadIdx.x] = a.n_rows;
  }
  __syncthreads();
  const bool vec4 = dim % 4 == 0;  // 16-byte copies (rows and the slice start 16-byte aligned)
  float o[kT][kV][kAttHeads];
#pragma unroll
  for (int k = 0; k < kT; ++k)
#pragma unroll
    for (int x = 0; x < kV; ++x)
#pragma unroll
      for (int hl = 0; hl < kAttHeads; ++hl) o[k][x][hl] = 0.0f;
  for (int k0 = 0; k0 < nt;) {
    const int k1 = attn_mq_run_end(sp, nt, k0);
    const AttnShape ua = attn_mq_run_union(sp, slo, snw, snr, k0, k1);
    for (int64_t c0 = 0; c0 < ua.n_rows; c0 += kChunk) {
      const int cn = static_cast<int>(ua.n_rows - c0 < kChunk ? ua.n_rows - c0 : kChunk);
      __syncthreads();  // the previous chunk is consumed
      for (int jj = threadIdx.x; jj < cn; jj += blockDim.x) {
        rows[jj] = attn_row(win, ua, comp, nullptr, dim, c0 + jj);
        unsigned m = 0;
        for (int k = k0; k < k1; ++k)
          if (attn_mq_row_j(ua, c0 + jj, sp[k], slo[k], snw[k], snr[k]) >= 0) m |= 1u << k;
        msk[jj] = m;
      }
      __syncthreads();
      attn_stage_v<kD>(vs, [&](int jj) { return rows[jj]; }, cn, i0, dim, vec4);
      cp_async_commit();
      // The probabilities while the V slices are in flight, ps[(jj * kT + k) * 8 + hl] = element
      // threadIdx.x + b * kCbDims: each thread's token k and head hl are fixed, its rows jj step by
      // kPsStep; all its loads issued before the stores.
      {
        constexpr int kPsStep = kCbDims / (kAttHeads * kT), kPs = kChunk / kPsStep;
        const int hl = threadIdx.x % kAttHeads, k = threadIdx.x / kAttHeads % kT, jj0 = threadIdx.x / (kAttHeads * kT);
        const bool tk = k >= k0 && k < k1 && h0 + hl < n_head;
        const int64_t p = sp[k], lo = slo[k], nw = snw[k], nr = snr[k];
        const float* sc = scratch + (t0 + k) * scratch_stride + (h0 + hl) * nr;
        float pv[kPs];
#pragma unroll
        for (int b = 0; b < kPs; ++b) {
          const int jj = jj0 + b * kPsStep;
          const int64_t j = tk && jj < cn ? attn_mq_row_j(ua, c0 + jj, p, lo, nw, nr) : -1;
          pv[b] = j >= 0 ? sc[j] : 0.0f;
        }
#pragma unroll
        for (int b = 0; b < kPs; ++b)
          if (jj0 + b * kPsStep < cn) ps[threadIdx.x + b * kCbDims] = pv[b];
      }
      cp_async_wait();
      __syncthreads();
      const float4* p4 = reinterpret_cast<const float4*>(ps);
#pragma unroll 2
      for (int jj = 0; jj < cn; ++jj) {
        float v[kV];
        if constexpr (kV == 2) {
          const float2 v2 = reinterpret_cast<const float2*>(vs + jj * kD)[threadIdx.x];
          v[0] = v2.x;
          v[kV - 1] = v2.y;
        } else {
          v[0] = vs[jj * kD + threadIdx.x];
        }
        auto add = [&](int k) {
          const float4 pa = p4[2 * (jj * kT + k)], pb = p4[2 * (jj * kT + k) + 1];
#pragma unroll
          for (int x = 0; x < kV; ++x) attn_acc8(o[k][x], pa, pb, v[x]);
        };
        const unsigned m = msk[jj];
        if (m == (1u << kT) - 1) {  // every token attends the row (all but a few rows of a run): no branches
#pragma unroll
          for (int k = 0; k < kT; ++k) add(k);
        } else {
#pragma unroll
          for (int k = 0; k < kT; ++k)
            if (m >> k & 1u) add(k);  // a row token k does not attend: no add
        }
      }
    }
    k0 = k1;
  }
#pragma unroll
  for (int k = 0; k < kT; ++k) {
    if (k >= nt) break;
    const float* den = scratch + (t0 + k) * scratch_stride + scratch_stride - n_head;
    float* ot = out + (t0 + k) * out_stride;
#pragma unroll
    for (int hl = 0; hl < kAttHeads; ++hl) {
      if (h0 + hl >= n_head) break;
      const float inv = 1.0f / den[h0 + hl];
#pragma unroll
      for (int x = 0; x < kV; ++x) {
        const int64_t i = i0 + threadIdx.x * kV + x;
        if (i < dim) ot[(h0 + hl) * dim + i] = o[k][x][hl] * inv;
      }
    }
  }
}

// DS4_CUDA_ATTN_MULTIQ_COMBINE: 0 = prefill chunks' weighted sums through attn_combine_rows_kernel
// (one token per block, comparisons), 1 = attn_combine_mq_kernel with 1 dim per thread, else
// (default) 2 dims per thread (measured faster: perf-notes, ninth pass); read once, independent
// of DS4_CUDA_ATTN_MULTIQ.
int attn_multiq_combine_mode() {
  static const int mode = [] {
    const char* v = std::getenv("DS4_CUDA_ATTN_MULTIQ_COMBINE");
    return v && v[0] == '0' ? 0 : v && v[0] == '1' ? 1 : 2;
  }();
  return mode;
}

// DS4_CUDA_ATTN_MULTIQ: 0 = prefill chunks' scores through attn_scores_kernel (one token per
// block, comparisons), 1 = attn_scores_mq_kernel with 1 row per lane, else (default) 2 rows per
// lane (measured faster: perf-notes, ninth pass); read once.
int attn_multiq_mode() {
  static const int mode = [] {
    const char* v = std::getenv("DS4_CUDA_ATTN_MULTIQ");
    return v && v[0] == '0' ? 0 : v && v[0] == '1' ? 1 : 2;
  }();
  return mode;
}

}  // namespace

int64_t attention_scratch_floats(int n_head, int64_t max_rows) {
  return static_cast<int64_t>(n_head) * (max_rows + 1);
}

namespace {

// sink_attention_batch's launches; rope_table and out_q8 (n_tok = 1 only): the inverse tail RoPE
// and the Q8_0 copy of the outputs in the combine kernel (attn_combine_kernel); rows_early (the
// decode step only): rows written by earlier steps loaded before the kernels' PDL waits, for
// the shapes whose older rows are known without the step's own writes (decided here, once).
void attention_launches(const float* q, int64_t q_stride, const float* sinks, int n_head, int64_t dim,
                        const float* raw, int64_t raw_cap, const float* chunk, int64_t chunk_pos0, int64_t n_swa,
                        const int64_t* pos, const float* comp, uint32_t ratio, const uint32_t* sel,
                        int64_t sel_stride, int64_t n_sel, int64_t max_rows, float* scratch, float* out,
                        int64_t out_stride, int n_tok, const float* rope_table, int n_pair, uint8_t* out_q8,
                        bool rows_early) {
  if (n_tok <= 0) return;
  rows_early = rows_early && n_tok == 1 && !sel && !chunk && raw_cap >= n_swa;
  const unsigned groups = static_cast<unsigned>((n_head + kAttHeads - 1) / kAttHeads);
  const AttnWin win{raw, raw_cap, chunk, chunk_pos0};
  const bool prep = n_tok > 1;  // batched: one softmax pass, then combine blocks that only sum
  const int64_t ss = prep ? attention_scratch_floats(n_head, max_rows) : static_cast<int64_t>(n_head) * max_rows;
  const size_t smem = static_cast<size_t>(dim) * kAttHeads * sizeof(float);
  const size_t msmem = static_cast<size_t>(attn_mq_tok4(dim)) * kMqTokens * sizeof(float4);
  const int mq = prep && !sel && msmem <= kMqMaxSmem ? attn_multiq_mode() : 0;
  if (mq) {  // consecutive tokens share their rows: each row element loaded once for kMqTokens tokens
    auto* mk = mq == 2 ? attn_scores_mq_kernel<kMqTokens, kMqLaneRows2, kMqRegs2>
                       : attn_scores_mq_kernel<kMqTokens, kMqLaneRows, kMqRegs>;
    const int rows = 32 * (mq == 2 ? kMqLaneRows2 : kMqLaneRows);
    allow_dynamic_smem(reinterpret_cast<const void*>(mk), msmem);
    // A run's union has at most max_rows + kMqTokens - 1 rows (attn_scores_mq_kernel); several
    // row tiles per block (one q load for them) once token and head groups alone fill the GPU.
    const int64_t tgroups = (n_tok + kMqTokens - 1) / kMqTokens;
    const int64_t tiles_all = (max_rows + kMqTokens - 1 + rows - 1) / rows;
    const int tiles = static_cast<int>(std::clamp<int64_t>(tgroups * groups / kMqBlocksPerTile, 1, kMqMaxTiles));
    const dim3 grid(static_cast<unsigned>((tiles_all + tiles - 1) / tiles), groups, static_cast<unsigned>(tgroups));
    launch_k(mk, grid, 256, msmem, q, q_stride, n_head, dim, win, n_swa, pos, comp, ratio, scratch, ss, n_tok,
             tiles);
  } else {
    const int lane_rows = n_tok > 1 ? kAttBatchLaneRows : 1, rows = 32 * lane_rows;
    auto* sk = n_tok > 1 ? attn_scores_kernel<kAttBatchLaneRows> : attn_scores_kernel<1>;
    allow_dynamic_smem(reinterpret_cast<const void*>(sk), smem);
    const dim3 grid(static_cast<unsigned>((max_rows + rows - 1) / rows), groups, static_cast<unsigned>(n_tok));
    launch_k(sk, grid, 256, smem, q, q_stride, n_head, dim, win, n_swa, pos, comp, ratio, sel, sel_stride, n_sel,
             scratch, ss, rows_early);
  }
  if (prep)
    launch_k(attn_softmax_kernel, dim3(groups, static_cast<unsigned>(n_tok)), kAttHeads * 32, 0, sinks, n_head, n_swa,
             pos, ratio, sel, n_sel, scratch, ss);
  const int cm = prep && !sel ? attn_multiq_combine_mode() : 0;
  if (cm) {  // consecutive tokens share their rows: each V slice staged once for kCmTokens tokens
    auto* ck = cm == 2 ? attn_combine_mq_kernel<kCmTokens, 2, kCmChunk2> : attn_combine_mq_kernel<kCmTokens, 1, kCbChunk>;
    const int64_t dims = kCbDims * (cm == 2 ? 2 : 1);
    const dim3 grid(static_cast<unsigned>((dim + dims - 1) / dims), groups,
                    static_cast<unsigned>((n_tok + kCmTokens - 1) / kCmTokens));
    launch_k(ck, grid, kCbDims, 0, n_head, dim, win, n_swa, pos, comp, ratio, scratch, ss, out, out_stride, n_tok);
    return;
  }
  if (prep) {
    launch_k(attn_combine_rows_kernel,
             dim3(static_cast<unsigned>((dim + kCbDims - 1) / kCbDims), groups, static_cast<unsigned>(n_tok)), kCbDims, 0,
             n_head, dim, win, n_swa, pos, comp, ratio, sel, sel_stride, n_sel, scratch, ss, out, out_stride);
    return;
  }
  const dim3 cgrid(static_cast<unsigned>((dim + kAttDims - 1) / kAttDims), groups, 1);
  static const bool helpers = !env_is_zero("DS4_CUDA_ATTN_HELPERS");
  constexpr size_t kStatic = 2 * kAttHeads * sizeof(float);  // ms, inv
  const bool big = combine_smem(kAttChunk) + kStatic <= smem_limit();
  const size_t csmem = combine_smem(big ? kAttChunk : kAttChunkSmall);
  const auto ck = big ? (helpers ? attn_combine_kernel<kAttChunk, true> : attn_combine_kernel<kAttChunk, false>)
                      : (helpers ? attn_combine_kernel<kAttChunkSmall, true> : attn_combine_kernel<kAttChunkSmall, false>);
  allow_dynamic_smem(reinterpret_cast<const void*>(ck), csmem, kStatic);
  const int threads = helpers ? kAttCombineMaxThreads : kAttCombineThreads;
  static const bool max_fused = !env_is_zero("DS4_CUDA_ATTN_MAX_FUSED");
  launch_k(ck, cgrid, threads, csmem, sinks, n_head, dim, win, n_swa, pos, comp, ratio, sel, sel_stride, n_sel, scratch,
           ss, out, out_stride, rope_table, n_pair, out_q8, rows_early, max_fused);
}

}  // namespace

SinkAttentionOut sink_attention(const float* q, const float* sinks, int n_head, int64_t dim, const float* raw,
                                int64_t raw_cap, int64_t n_swa, const int64_t* pos, const float* comp,
                                uint32_t ratio, const uint32_t* sel, int64_t n_sel, int64_t max_rows,
                                float* scratch, float* out, const float* inv_rope_table, int n_pair,
                                uint8_t* out_q8) {
  SinkAttentionOut r;
  r.roped = inv_rope_table && n_pair > 0 && dim % 2 == 0 && 2 * static_cast<int64_t>(n_pair) <= dim;
  // Quantized only if the values stored are final: no RoPE asked for, or the RoPE fused.
  r.quantized = out_q8 && dim % 32 == 0 && (r.roped || !inv_rope_table);
  attention_launches(q, dim * n_head, sinks, n_head, dim, raw, raw_cap, nullptr, 0, n_swa, pos, comp, ratio, sel, 0,
                     n_sel, max_rows, scratch, out, dim * n_head, 1, r.roped ? inv_rope_table : nullptr,
                     r.roped ? n_pair : 0, r.quantized ? out_q8 : nullptr, true);
  return r;
}

void sink_attention_batch(const float* q, int64_t q_stride, const float* sinks, int n_head, int64_t dim,
                          const float* raw, int64_t raw_cap, const float* chunk, int64_t chunk_pos0, int64_t n_swa,
                          const int64_t* pos, const float* comp, uint32_t ratio, const uint32_t* sel,
                          int64_t sel_stride, int64_t n_sel, int64_t max_rows, float* scratch, float* out,
                          int64_t out_stride, int n_tok) {
  attention_launches(q, q_stride, sinks, n_head, dim, raw, raw_cap, chunk, chunk_pos0, n_swa, pos, comp, ratio, sel,
                     sel_stride, n_sel, max_rows, scratch, out, out_stride, n_tok, nullptr, 0, nullptr, false);
}

}  // namespace ds4::cuda
