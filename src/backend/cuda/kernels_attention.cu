// Sink attention over the window and compressed rows (spec §3.4.8, model::sink_attention): the
// scores and the softmax-weighted sum, in the CPU's operation order.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

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
// Rows per scores lane: 1 for the decode step (more blocks for one token), kAttBatchLaneRows for
// prefill chunks (ncu, one row per lane: 91 % L1 throughput, the q reads from shared memory).
constexpr int kAttBatchLaneRows = 4;
constexpr int kAttCombineThreads = kAttHeads * 32 + 32;  // 8 output warps + 1 denominator warp

// Attention scores (model::sink_attention step 1) of kAttHeads heads for 32 * kLaneRows rows:
// 8 lanes per row hold dot8's partial sums; each row element is loaded once and multiplied by
// the 8 heads' q values, stored in shared memory as [dim][8] so one lane reads them as two
// float4, once for its kLaneRows rows (rows g, g + 32, ... of the block for lane group g). The
// tree and tail follow dot8, then the scale, as the CPU does. scratch is [head][row] with stride
// n_rows (this position's). Token blockIdx.z of a batch: q, pos and scratch advance by q_stride,
// 1 and scratch_stride (sel, when set, by sel_stride).
template <int kLaneRows>
__global__ void __launch_bounds__(256, kLaneRows > 1 ? 2 : 0)
attn_scores_kernel(const float* q, int64_t q_stride, int n_head, int64_t dim, AttnWin win, int64_t n_swa,
                   const int64_t* pos, const float* comp, uint32_t ratio, const uint32_t* sel, int64_t sel_stride,
                   int64_t n_sel, float* scratch, int64_t scratch_stride) {
  pdl_wait();
  pdl_trigger();
  if (sel) sel += blockIdx.z * sel_stride;
  q += blockIdx.z * q_stride;
  pos += blockIdx.z;
  scratch += blockIdx.z * scratch_stride;
  extern __shared__ float4 qs4[];  // [dim][kAttHeads] floats
  float* qs = reinterpret_cast<float*>(qs4);
  const AttnShape a = attn_shape(pos, n_swa, ratio, sel, n_sel);
  constexpr int kRows = 32 * kLaneRows, kRegs = kAttLaneRegs / kLaneRows;
  if (blockIdx.x * static_cast<int64_t>(kRows) >= a.n_rows) return;  // whole block idle
  const int h0 = blockIdx.y * kAttHeads;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {  // the 8 heads' loads in flight together
    float v[kAttHeads];
#pragma unroll
    for (int hl = 0; hl < kAttHeads; ++hl) v[hl] = h0 + hl < n_head ? q[(h0 + hl) * dim + i] : 0.0f;
    qs4[i * 2] = make_float4(v[0], v[1], v[2], v[3]);
    qs4[i * 2 + 1] = make_float4(v[4], v[5], v[6], v[7]);
  }
  __syncthreads();
  const int l = threadIdx.x & 7;
  int64_t j[kLaneRows];
  bool on[kLaneRows];
  const float* row[kLaneRows];
#pragma unroll
  for (int r = 0; r < kLaneRows; ++r) {
    j[r] = blockIdx.x * static_cast<int64_t>(kRows) + threadIdx.x / 8 + 32 * r;
    on[r] = j[r] < a.n_rows;
    row[r] = attn_row(win, a, comp, sel, dim, on[r] ? j[r] : 0);
  }
  const int64_t full = dim / 8 * 8;
  float acc[kLaneRows][kAttHeads];
#pragma unroll
  for (int r = 0; r < kLaneRows; ++r)
#pragma unroll
    for (int hl = 0; hl < kAttHeads; ++hl) acc[r][hl] = 0.0f;
  for (int64_t c = 0; c < full; c += 8 * kRegs) {
    float rv[kLaneRows][kRegs];
#pragma unroll
    for (int r = 0; r < kLaneRows; ++r)
#pragma unroll
      for (int u = 0; u < kRegs; ++u) rv[r][u] = c + 8 * u < full ? row[r][c + 8 * u + l] : 0.0f;
#pragma unroll
    for (int u = 0; u < kRegs; ++u) {
      if (c + 8 * u >= full) break;
      const int64_t i = c + 8 * u + l;
      const float4 qa = qs4[i * 2], qb = qs4[i * 2 + 1];
#pragma unroll
      for (int r = 0; r < kLaneRows; ++r) {
        const float x = rv[r][u];
        acc[r][0] += qa.x * x;
        acc[r][1] += qa.y * x;
        acc[r][2] += qa.z * x;
        acc[r][3] += qa.w * x;
        acc[r][4] += qb.x * x;
        acc[r][5] += qb.y * x;
        acc[r][6] += qb.z * x;
        acc[r][7] += qb.w * x;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kLaneRows; ++r)
#pragma unroll
    for (int hl = 0; hl < kAttHeads; ++hl) {
      float s = acc[r][hl];
      s = s + __shfl_down_sync(0xffffffffu, s, 4, 8);  // l<4: acc[l] + acc[l+4]
      s = s + __shfl_down_sync(0xffffffffu, s, 1, 8);  // l=0: (0+4)+(1+5); l=2: (2+6)+(3+7)
      s = s + __shfl_down_sync(0xffffffffu, s, 2, 8);  // l=0: the tree
      acc[r][hl] = s;
    }
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

// Asynchronous global -> shared copies of 16 or 4 bytes; src_bytes = 0 fills zeros (reads nothing).
__device__ void attn_cp_async16(float* dst, const float* src, int src_bytes) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ void attn_cp_async4(float* dst, const float* src, int src_bytes) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
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
// kAttChunk rows: the V slices of all its rows are copied into shared memory at once (cp.async,
// every load in flight together) while the block makes the probabilities exp(s - max); then warp
// w < 8 (head h0 + w, lane = output dim) sums each output value over the rows in order, every V
// element read once for the 8 heads, and warp 8's lanes sum the 8 denominators in row order.
// Token blockIdx.z of a batch as attn_scores_kernel (out advances by out_stride). kChunk: rows
// per chunk (kAttChunk: one block per SM for the decode step's single token).
template <int kChunk>
__global__ void __launch_bounds__(kAttCombineThreads, kChunk == kAttChunk ? 1 : 2)
attn_combine_kernel(const float* sinks, int n_head, int64_t dim, AttnWin win, int64_t n_swa, const int64_t* pos,
                    const float* comp, uint32_t ratio, const uint32_t* sel, int64_t sel_stride, int64_t n_sel,
                    const float* scratch, int64_t scratch_stride, float* out, int64_t out_stride) {
  pdl_wait();
  pdl_trigger();
  if (sel) sel += blockIdx.z * sel_stride;
  pos += blockIdx.z;
  scratch += blockIdx.z * scratch_stride;
  out += blockIdx.z * out_stride;
  const float* raw = win.raw;
  const int64_t raw_cap = win.raw_cap;
  extern __shared__ float4 smem4[];
  float* vs = reinterpret_cast<float*>(smem4);
  float* ps = vs + kChunk * kAttDims;
  uint32_t* sels = reinterpret_cast<uint32_t*>(ps + kAttHeads * (kChunk + 1));
  __shared__ float ms[kAttHeads], inv[kAttHeads];
  const AttnShape a = attn_shape(pos, n_swa, ratio, sel, n_sel);
  const int64_t n_rows = a.n_rows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int h0 = blockIdx.y * kAttHeads;
  const int64_t i0 = blockIdx.x * static_cast<int64_t>(kAttDims);
  const int64_t slot0 = a.lo % raw_cap;
  const bool vec4 = dim % 4 == 0;  // 16-byte copies (rows and the slice start 16-byte aligned)
  float denom = 0.0f, o = 0.0f;
  for (int64_t c0 = 0; c0 < n_rows; c0 += kChunk) {
    const int cn = static_cast<int>(n_rows - c0 < kChunk ? n_rows - c0 : kChunk);
    __syncthreads();  // the previous chunk is consumed
    if (sel) {
      for (int jj = threadIdx.x; jj < cn; jj += blockDim.x)
        if (c0 + jj >= a.n_win) sels[jj] = sel[c0 + jj - a.n_win];
      __syncthreads();
    }
    // Row c0 + jj (attn_row without a 64-bit modulo per row).
    auto row_at = [&](int jj) -> const float* {
      const int64_t r = c0 + jj;
      if (r < a.n_win && win.chunk && a.lo + r >= win.chunk_pos0) return win.chunk + (a.lo + r - win.chunk_pos0) * dim;
      if (r < a.n_win) {
        int64_t slot = slot0 + r;
        while (slot >= raw_cap) slot -= raw_cap;
        return raw + slot * dim;
      }
      return comp + (sel ? static_cast<int64_t>(sels[jj]) : r - a.n_win) * dim;
    };
    if (vec4) {
      for (int e = threadIdx.x; e < cn * (kAttDims / 4); e += blockDim.x) {
        const int jj = e / (kAttDims / 4), k = 4 * (e % (kAttDims / 4));
        const float* row = row_at(jj);
        const bool in = i0 + k < dim;
        attn_cp_async16(vs + jj * kAttDims + k, in ? row + i0 + k : row, in ? 16 : 0);
      }
    } else {
      for (int e = threadIdx.x; e < cn * kAttDims; e += blockDim.x) {
        const int jj = e / kAttDims, k = e % kAttDims;
        const float* row = row_at(jj);
        const bool in = i0 + k < dim;
        attn_cp_async4(vs + jj * kAttDims + k, in ? row + i0 + k : row, in ? 4 : 0);
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    if (c0 == 0) {  // per-head max over all rows (with the sink), one warp per head
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
    for (int e0 = 0; e0 < kAttHeads * cn; e0 += kBatch * static_cast<int>(blockDim.x)) {
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
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    if (warp == kAttHeads) {
      if (lane < kAttHeads && h0 + lane < n_head) {
        const float* p = ps + lane * (kChunk + 1);
#pragma unroll 8
        for (int jj = 0; jj < cn; ++jj) denom += p[jj];
      }
    } else {
      const float* p = ps + warp * (kChunk + 1);
      const float* v = vs + lane;
#pragma unroll 8
      for (int jj = 0; jj < cn; ++jj) o += p[jj] * v[jj * kAttDims];
    }
  }
  if (warp == kAttHeads && lane < kAttHeads) inv[lane] = 1.0f / denom;
  __syncthreads();
  const int64_t i = i0 + lane;
  if (warp < kAttHeads && h0 + warp < n_head && i < dim) out[(h0 + warp) * dim + i] = o * inv[warp];
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
    if (vec4) {
      for (int e = threadIdx.x; e < cn * (kCbDims / 4); e += blockDim.x) {
        const int jj = e / (kCbDims / 4), k = 4 * (e % (kCbDims / 4));
        const bool in = i0 + k < dim;
        attn_cp_async16(vs + jj * kCbDims + k, in ? rows[jj] + i0 + k : rows[jj], in ? 16 : 0);
      }
    } else {
      for (int e = threadIdx.x; e < cn * kCbDims; e += blockDim.x) {
        const int jj = e / kCbDims, k = e % kCbDims;
        const bool in = i0 + k < dim;
        attn_cp_async4(vs + jj * kCbDims + k, in ? rows[jj] + i0 + k : rows[jj], in ? 4 : 0);
      }
    }
    cp_async_wait();
    __syncthreads();
    const float4* p4 = reinterpret_cast<const float4*>(ps);
#pragma unroll 4
    for (int jj = 0; jj < cn; ++jj) {
      const float v = vs[jj * kCbDims + threadIdx.x];
      const float4 pa = p4[2 * jj], pb = p4[2 * jj + 1];
      o[0] += pa.x * v;
      o[1] += pa.y * v;
      o[2] += pa.z * v;
      o[3] += pa.w * v;
      o[4] += pb.x * v;
      o[5] += pb.y * v;
      o[6] += pb.z * v;
      o[7] += pb.w * v;
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

}  // namespace

void sink_attention(const float* q, const float* sinks, int n_head, int64_t dim, const float* raw,
                    int64_t raw_cap, int64_t n_swa, const int64_t* pos, const float* comp,
                    uint32_t ratio, const uint32_t* sel, int64_t n_sel, int64_t max_rows,
                    float* scratch, float* out) {
  sink_attention_batch(q, dim * n_head, sinks, n_head, dim, raw, raw_cap, nullptr, 0, n_swa, pos, comp, ratio, sel,
                       0, n_sel, max_rows, scratch, out, dim * n_head, 1);
}

int64_t attention_scratch_floats(int n_head, int64_t max_rows) {
  return static_cast<int64_t>(n_head) * (max_rows + 1);
}

void sink_attention_batch(const float* q, int64_t q_stride, const float* sinks, int n_head, int64_t dim,
                          const float* raw, int64_t raw_cap, const float* chunk, int64_t chunk_pos0, int64_t n_swa,
                          const int64_t* pos, const float* comp, uint32_t ratio, const uint32_t* sel,
                          int64_t sel_stride, int64_t n_sel, int64_t max_rows, float* scratch, float* out,
                          int64_t out_stride, int n_tok) {
  if (n_tok <= 0) return;
  const unsigned groups = static_cast<unsigned>((n_head + kAttHeads - 1) / kAttHeads);
  const AttnWin win{raw, raw_cap, chunk, chunk_pos0};
  const bool prep = n_tok > 1;  // batched: one softmax pass, then combine blocks that only sum
  const int64_t ss = prep ? attention_scratch_floats(n_head, max_rows) : static_cast<int64_t>(n_head) * max_rows;
  const size_t smem = static_cast<size_t>(dim) * kAttHeads * sizeof(float);
  const int lane_rows = n_tok > 1 ? kAttBatchLaneRows : 1, rows = 32 * lane_rows;
  auto* sk = n_tok > 1 ? attn_scores_kernel<kAttBatchLaneRows> : attn_scores_kernel<1>;
  allow_dynamic_smem(reinterpret_cast<const void*>(sk), smem);
  const dim3 grid(static_cast<unsigned>((max_rows + rows - 1) / rows), groups, static_cast<unsigned>(n_tok));
  launch_k(sk, grid, 256, smem, q, q_stride, n_head, dim, win, n_swa, pos, comp, ratio, sel, sel_stride, n_sel,
           scratch, ss);
  if (prep)
    launch_k(attn_softmax_kernel, dim3(groups, static_cast<unsigned>(n_tok)), kAttHeads * 32, 0, sinks, n_head, n_swa,
             pos, ratio, sel, n_sel, scratch, ss);
  if (prep) {
    launch_k(attn_combine_rows_kernel,
             dim3(static_cast<unsigned>((dim + kCbDims - 1) / kCbDims), groups, static_cast<unsigned>(n_tok)), kCbDims, 0,
             n_head, dim, win, n_swa, pos, comp, ratio, sel, sel_stride, n_sel, scratch, ss, out, out_stride);
    return;
  }
  const dim3 cgrid(static_cast<unsigned>((dim + kAttDims - 1) / kAttDims), groups, 1);
  const size_t csmem = combine_smem(kAttChunk);
  allow_dynamic_smem(reinterpret_cast<const void*>(attn_combine_kernel<kAttChunk>), csmem);
  launch_k(attn_combine_kernel<kAttChunk>, cgrid, kAttCombineThreads, csmem, sinks, n_head, dim, win, n_swa, pos, comp,
           ratio, sel, sel_stride, n_sel, scratch, ss, out, out_stride);
}

}  // namespace ds4::cuda
