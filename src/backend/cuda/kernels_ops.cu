// Per-token kernels of the forward pass other than matvec, HC, compressor/indexer and attention:
// norms, embedding lookup, RoPE (with the KV store), router, SwiGLU, the routed combine, expert
// parallelism helpers. Each is a direct port of the CPU unit named in kernels.h, keeping its
// operation order so results match to the last bit except where f64-evaluated exp/log1p round
// differently from glibc expf/log1pf.
#include <cuda_fp16.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/l2_prefetch.h"
#include "backend/cuda/phase_stamps.cuh"
#include "backend/cuda/step_profile.h"
#include "common/error.h"

namespace ds4::cuda {
namespace {

__global__ void rms_norm_kernel(const float* x, const float* w, float* out, int64_t dim, float eps,
                                uint8_t* q8_0) {
  DS4_PHASE_BEGIN(ps);  // phase stamps (-DDS4_CUDA_PHASE_STAMPS builds): the q_a norm's ~7 us
  pdl_wait();
  pdl_trigger();
  DS4_PHASE(ps);
  const float* xr = x + blockIdx.x * dim;
  float* orow = out + blockIdx.x * dim;
  uint8_t* qrow = q8_0 ? q8_0 + blockIdx.x * (dim / 32) * sizeof(BQ8_0Act) : nullptr;
  if (qrow && dim <= kNormRegs * static_cast<int64_t>(blockDim.x)) {  // Q8_0 from registers
    float hv[kNormRegs];
    block_rms_norm_regs(xr, w, orow, dim, eps, hv, DS4_PHASE_ADDR(ps));
    block_quantize_q8_0_regs(hv, dim, qrow);
    DS4_PHASE(ps);
    DS4_PHASE_PRINT(ps, "qa_norm", blockIdx.x == 0);  // wait, sum, scale, stores, Q8_0
    return;
  }
  block_rms_norm_row(xr, w, orow, dim, eps);
  if (!qrow) return;  // uniform
  __syncthreads();
  block_quantize_row(orow, dim, qrow, nullptr);
}

// Embedding row lookup (quant::dequantize_row of token_embd row tok[0]) replicated into n_hc
// streams (model::hc_from_embedding). Types: F32, F16, BF16, Q8_0.
__global__ void embed_kernel(const uint8_t* table, uint32_t type, size_t row_bytes, const int32_t* tokens,
                             const int64_t* pos, int n_hc, int64_t d, float* x) {
  pdl_wait();
  pdl_trigger();
  pos += blockIdx.y;  // token blockIdx.y of a batch
  x += blockIdx.y * n_hc * d;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= d) return;
  const uint8_t* row = table + static_cast<size_t>(tokens[*pos]) * row_bytes;
  float v;
  if (type == 0) {
    v = reinterpret_cast<const float*>(row)[i];
  } else if (type == 1) {
    v = __half2float(__ushort_as_half(reinterpret_cast<const uint16_t*>(row)[i]));
  } else if (type == 30) {
    v = __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(row)[i]) << 16);
  } else {  // Q8_0: d * q
    const uint8_t* b = row + (i / 32) * 34;
    const float dd = __half2float(__ushort_as_half(static_cast<uint16_t>(b[0] | (b[1] << 8))));
    v = dd * static_cast<float>(static_cast<int8_t>(b[2 + i % 32]));
  }
  for (int r = 0; r < n_hc; ++r) x[r * d + i] = v;
}

__global__ void rope_kernel(float* x, int n_heads, int64_t head_dim, const float* table, int n_pair,
                            const int64_t* pos, float sign) {
  pdl_wait();
  pdl_trigger();
  pos += blockIdx.y;
  x += blockIdx.y * n_heads * head_dim;
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= static_cast<int64_t>(n_heads) * n_pair) return;
  const int64_t h = k / n_pair;
  rope_pair(x + h * head_dim + head_dim - 2 * n_pair, table + *pos * 2 * n_pair, n_pair,
            static_cast<int>(k % n_pair), sign);
}

// Rows of one norm_rope_kernel launch that share their treatment: `rows` rows of x (weight w
// optional), with kv_round the FP8 + f16 rounding of the KV row and, with raw, its ring store.
struct NormRopeRows {
  float* x;
  const float* w;
  int rows;
  int64_t n_fp8;
  bool kv_round;
  float* raw;
  int64_t raw_cap;
};

// One block per row: RMSNorm (weight optional), then the tail RoPE at *pos, and with kv_round
// the KV row store (FP8 round trip of [0, n_fp8) in blocks of 64, f16 rounding, with raw ring
// row *pos % raw_cap). Blocks 0 .. a.rows - 1 take a's rows, the next b.rows b's (the query
// heads and the KV row in one launch). Stages are separated by barriers and run the CPU units'
// operations.
__global__ void norm_rope_kernel(NormRopeRows a, NormRopeRows b, int64_t dim, float eps, const float* table,
                                 int n_pair, const int64_t* pos) {
  pdl_wait();
  pdl_trigger();
  const bool in_a = static_cast<int>(blockIdx.x) < a.rows;  // uniform per block
  const NormRopeRows r = in_a ? a : b;
  const int64_t rows = r.rows, i_row = in_a ? blockIdx.x : blockIdx.x - a.rows;
  pos += blockIdx.y;
  float* row = r.x + (blockIdx.y * rows + i_row) * dim;
  block_rms_norm_row(row, r.w, row, dim, eps);
  __syncthreads();
  for (int p = threadIdx.x; p < n_pair; p += blockDim.x)
    rope_pair(row + dim - 2 * n_pair, table + *pos * 2 * n_pair, n_pair, p, 1.0f);
  if (!r.kv_round) return;
  __syncthreads();
  block_round_trip<true>(row, r.n_fp8, 64);
  __syncthreads();
  float* dst = r.raw ? r.raw + (*pos % r.raw_cap) * dim : nullptr;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = __half2float(__float2half_rn(row[i]));
    row[i] = v;
    if (dst) dst[i] = v;
  }
}

// Row t of the last min(n_tok, raw_cap) rows into ring row pos[t] % raw_cap.
__global__ void kv_ring_store_kernel(const float* rows, int64_t dim, const int64_t* pos, float* raw, int64_t raw_cap,
                                     int first) {
  pdl_wait();
  pdl_trigger();
  const int t = first + static_cast<int>(blockIdx.x);
  float* dst = raw + (pos[t] % raw_cap) * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = rows[t * dim + i];
}

__device__ float softplus(float z) {
  if (z > 20.0f) return z;
  if (z < -20.0f) return exp_f(z);
  return log1p_f(exp_f(z));
}

// model::router_select_top_k keeps the first k of a stable sort by `beats` (higher score, NaN
// last, earlier expert first on ties): a strict total order, so expert e is selected in place
// rank(e) = #{experts before e} when that rank is below k. router_key turns the order into one
// 64-bit comparison: the score's float_order_key (-0 as +0, NaN below every number), then
// the inverted expert id, so that on equal scores the earlier expert has the larger key.
__device__ uint64_t router_key(float s, int e) {
  return (static_cast<uint64_t>(float_order_key(s)) << 32) | (0xffffffffu - static_cast<uint32_t>(e));
}

// The k largest of the block's keys (thread t holding key[t], 0 past n: below every expert's key,
// whose low word ~e is never 0), in descending order into sel_s as expert ids, by warp maxima:
// each warp's k largest into cand (k rounds of a 64-bit warp max: the high words' redux, then
// the low words' among the lanes that hold that high word; keys are distinct, so one lane holds
// the winner and drops it), then warp 0 takes the k largest of the warps' candidates the same
// way. Requires n <= blockDim.x and blockDim.x / 32 * k <= kRouterCand (so k <= 32 at 256
// threads). The same selection as the rank scan: the k largest keys in order.
constexpr int kRouterCand = 256;  // candidate keys: 8 per lane of warp 0
__device__ __forceinline__ uint64_t warp_max_key(uint64_t v) {
  const uint32_t hi = __reduce_max_sync(0xffffffffu, static_cast<uint32_t>(v >> 32));
  const uint32_t lo = __reduce_max_sync(0xffffffffu, static_cast<uint32_t>(v >> 32) == hi ? static_cast<uint32_t>(v) : 0u);
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
__device__ void router_select_warps(const uint64_t* key, int n, int k, uint64_t* cand, int* sel_s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  uint64_t mine = static_cast<int>(threadIdx.x) < n ? key[threadIdx.x] : 0;
  for (int r = 0; r < k; ++r) {
    const uint64_t m = warp_max_key(mine);
    if (mine == m) mine = 0;
    if (lane == 0) cand[warp * k + r] = m;
  }
  __syncthreads();
  if (warp != 0) return;
  constexpr int kPer = kRouterCand / 32;
  uint64_t c[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) c[j] = lane + 32 * j < warps * k ? cand[lane + 32 * j] : 0;
  for (int r = 0; r < k; ++r) {
    uint64_t best = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) best = c[j] > best ? c[j] : best;
    const uint64_t m = warp_max_key(best);
#pragma unroll
    for (int j = 0; j < kPer; ++j) c[j] = c[j] == m ? 0 : c[j];
    if (lane == 0) sel_s[r] = static_cast<int>(0xffffffffu - static_cast<uint32_t>(m));
  }
}

// Routing for one token per block (model::route): probabilities sqrt(softplus(logit)), the
// selection (hash table; else by warp maxima with warp_select, or each expert's rank by its
// biased score counted against every other expert's key, a scan the warp leaves once all its
// lanes are past k), then warp 0's weights in selection order and each slot's place in the
// stable order by expert id.
// Shared memory: n keys (u64), n probabilities, k selected ids, k selected probabilities.
__global__ void router_kernel(const float* logits, int n, const float* bias, const int32_t* tid2eid,
                              const int32_t* tokens, const int64_t* pos, int k, float scale, float* p_out,
                              int32_t* sel, float* weights, int32_t* order, bool warp_select) {
  DS4_PHASE_BEGIN(ps);
  pdl_wait();
  DS4_PHASE(ps);
  pdl_trigger();
  logits += blockIdx.x * static_cast<int64_t>(n);  // token blockIdx.x of a batch
  p_out += blockIdx.x * static_cast<int64_t>(n);
  pos += blockIdx.x;
  sel += blockIdx.x * k;
  weights += blockIdx.x * k;
  order += blockIdx.x * k;
  extern __shared__ uint64_t router_smem[];
  uint64_t* key = router_smem;
  float* p = reinterpret_cast<float*>(router_smem + n);
  int* sel_s = reinterpret_cast<int*>(p + n);
  if (tid2eid) {  // the hash table's ids, loaded while the probabilities are computed
    for (int i = threadIdx.x; i < k; i += blockDim.x) sel_s[i] = tid2eid[static_cast<int64_t>(tokens[*pos]) * k + i];
  }
  for (int e = threadIdx.x; e < n; e += blockDim.x) {
    const float pe = sqrtf(softplus(logits[e]));
    p[e] = pe;
    p_out[e] = pe;
    key[e] = router_key(bias ? pe + bias[e] : pe, e);
  }
  __syncthreads();
  DS4_PHASE(ps);
  if (!tid2eid && warp_select) {
    __shared__ uint64_t cand[kRouterCand];
    router_select_warps(key, n, k, cand, sel_s);
  } else if (!tid2eid) {
    for (int e0 = threadIdx.x - (threadIdx.x & 31); e0 < n; e0 += blockDim.x) {  // warp-uniform
      const int e = e0 + (threadIdx.x & 31);
      const uint64_t ke = e < n ? key[e] : ~uint64_t{0};  // past n: rank 0 from the start, never stored
      int rank = 0;
      for (int j0 = 0; j0 < n; j0 += 32) {
        const int j1 = j0 + 32 < n ? j0 + 32 : n;
        for (int j = j0; j < j1; ++j) rank += key[j] > ke;
        if (__all_sync(0xffffffffu, e >= n || rank >= k)) break;
      }
      if (e < n && rank < k) sel_s[rank] = e;
    }
  }
  if (!tid2eid) __syncthreads();  // uniform: sel_s complete
  DS4_PHASE(ps);
  // Warp 0's tail: the selected probabilities gathered at once, every lane adding them in
  // selection order (the CPU's), and slot i's place in the stable sort by expert id counted
  // (#{slots j with a smaller id, or the same id and j < i}) instead of thread 0's insertion
  // sort, a chain of dependent shared-memory loads.
  if (threadIdx.x >= 32) return;
  float* ps_sel = reinterpret_cast<float*>(sel_s + k);  // [k]: p of the selected experts
  for (int i = threadIdx.x; i < k; i += 32) ps_sel[i] = p[sel_s[i]];
  __syncwarp();
  float sum = 0.0f;
  for (int i = 0; i < k; ++i) sum += ps_sel[i];
  if (sum < 6.103515625e-5f) sum = 6.103515625e-5f;
  for (int i = threadIdx.x; i < k; i += 32) {
    const int e = sel_s[i];
    sel[i] = e;
    weights[i] = ps_sel[i] / sum * scale;
    int place = 0;
    for (int j = 0; j < k; ++j) place += sel_s[j] < e || (sel_s[j] == e && j < i);
    order[place] = i;
  }
  DS4_PHASE(ps);
  DS4_PHASE_PRINT(ps, warp_select ? "router_warp" : (tid2eid ? "router_hash" : "router_scan"), blockIdx.x == 0);
}

__global__ void swiglu_kernel(const float* gate, const float* up, int groups, int64_t n,
                              float clamp, const float* w, float* out) {
  pdl_wait();
  pdl_trigger();
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= groups * n) return;
  out[k] = swiglu_value(gate[k], up[k], clamp, w ? w[k / n] : 1.0f);
}

// moe_combine then hc_post in one pass: thread k = (stream c, index i) forms y[i] (the routed
// rows in `order`, then + shared) itself and applies hc_post's formula to it.
__global__ void moe_combine_hc_post_kernel(const float* down, const int32_t* order, int n_used, int64_t d,
                                           const float* shared, const float* x, const float* post,
                                           const float* comb, int n, float* out) {
  pdl_wait();
  pdl_trigger();
  const int64_t tk = blockIdx.y;  // token of a batch
  down += tk * n_used * d;
  order += tk * n_used;
  shared += tk * d;
  x += tk * n * d;
  post += tk * n;
  comb += tk * n * n;
  out += tk * n * d;
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= n * d) return;
  const int c = static_cast<int>(k / d);
  const int64_t i = k % d;
  float m = 0.0f;
  for (int s = 0; s < n_used; ++s) m += down[order[s] * d + i];
  const float y = m + shared[i];
  float o = y * post[c];
  for (int r = 0; r < n; ++r) o += comb[c + n * r] * x[r * d + i];
  out[k] = o;
}

__global__ void localize_experts_kernel(const int32_t* sel, int n_used, int begin, int end, int32_t* local) {
  pdl_wait();
  pdl_trigger();
  const int s = threadIdx.x;
  if (s < n_used) local[s] = sel[s] >= begin && sel[s] < end ? sel[s] - begin : -1;
}

__global__ void sum_slots_kernel(const float* slots, int n_slots, int64_t n, float* y) {
  pdl_wait();
  pdl_trigger();
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= n) return;
  float m = slots[j];
  for (int r = 1; r < n_slots; ++r) m += slots[r * n + j];
  y[j] = m;
}

// Bulk L2 prefetches of p's ranges (l2_prefetch.h): a grid-stride loop over all their chunks,
// one cp.async.bulk.prefetch.L2 per chunk. No PDL wait: it reads only the ids, which its
// launch's full (event) dependency has completed, and writes nothing.
__global__ void l2_prefetch_kernel(L2Prefetch p) {
#if __CUDA_ARCH__ >= 900
  const uint64_t t = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x, stride = gridDim.x * uint64_t{blockDim.x};
  uint64_t first = 0;  // index of the current range's first chunk among all of the launch's chunks
  for (int r = 0; r < p.n; ++r) {
    const L2Range& g = p.r[r];
    for (int i = 0; i < g.count; ++i) {
      uint64_t a = reinterpret_cast<uint64_t>(g.base);
      if (g.ids) {
        const int id = g.ids[i];
        if (id < 0 || id >= g.id_limit) continue;
        a += static_cast<uint64_t>(id) * g.stride;
      }
      const uint64_t n = l2_chunks(a, g.bytes);
      for (uint64_t k = l2_first_of(first, t, stride); k < first + n; k += stride) {
        const L2Chunk c = l2_chunk(a, g.bytes, k - first);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(c.addr), "r"(c.bytes) : "memory");
      }
      first += n;
    }
  }
#endif
}

__global__ void sleep_kernel(int64_t us) {
  for (int64_t i = 0; i < us; ++i) __nanosleep(1000);
}

}  // namespace

void device_sleep(int64_t us) { sleep_kernel<<<1, 1, 0, stream()>>>(us); }

bool l2_prefetch_supported() { return cc_major() >= 9; }

void l2_prefetch(const L2Prefetch& p) {
  if (p.n < 0 || p.n > kL2MaxRanges) fail("l2_prefetch: {} ranges (at most {})", p.n, kL2MaxRanges);
  uint64_t chunks = 0;  // an upper bound: every id valid
  for (int r = 0; r < p.n; ++r)
    chunks += static_cast<uint64_t>(std::max(p.r[r].count, 0)) * (p.r[r].bytes / kL2ChunkBytes + 2);
  if (chunks == 0) return;
  // About one chunk per thread, one warp per block, at most one block per SM.
  const uint64_t blocks = std::min<uint64_t>((chunks + 31) / 32, static_cast<uint64_t>(sm_count()));
  l2_prefetch_kernel<<<static_cast<unsigned>(blocks), 32, 0, stream()>>>(p);
}

void rms_norm(const float* x, const float* weight, float* out, int64_t dim, int n_rows, float eps,
              uint8_t* q8_0) {
  if (dim % 32 != 0) q8_0 = nullptr;
  launch_k(rms_norm_kernel, n_rows, kThreads, 0, x, weight, out, dim, eps, q8_0);
}

void rope_tail(float* x, int n_heads, int64_t head_dim, const float* table, int n_pair,
               const int64_t* pos, bool inverse, int n_tok) {
  const dim3 grid(blocks_for(static_cast<int64_t>(n_heads) * n_pair), static_cast<unsigned>(n_tok));
  launch_k(rope_kernel, grid, kThreads, 0, 
      x, n_heads, head_dim, table, n_pair, pos, inverse ? -1.0f : 1.0f);
}

void embed(const uint8_t* table, uint32_t type, size_t row_bytes, const int32_t* tokens,
           const int64_t* pos, int n_hc, int64_t d, float* x, int n_tok) {
  launch_k(embed_kernel, dim3(blocks_for(d), static_cast<unsigned>(n_tok)), kThreads, 0, table, type, row_bytes,
           tokens, pos, n_hc, d, x);
}

void router(const float* logits, int n_expert, const float* bias, const int32_t* tid2eid,
            const int32_t* tokens, const int64_t* pos, int n_used, float scale, float* probs,
            int32_t* sel, float* weights, int32_t* order, int n_tok) {
  const size_t smem = n_expert * (sizeof(uint64_t) + sizeof(float)) + 2 * n_used * sizeof(int32_t);
  allow_dynamic_smem(reinterpret_cast<const void*>(router_kernel), smem);  // > 48 KiB past ~4000 experts
  // The selection by warp maxima where it fits one key per thread (every other shape takes the
  // rank scan); DS4_CUDA_ROUTER_WARP=0: the rank scan everywhere (session 38, H100: decode
  // +0.1 % / +0.6 % at 2K / 8K with warp maxima). Read at every launch, so the kernel test runs
  // both forms.
  const bool warp_on = !env_is_zero("DS4_CUDA_ROUTER_WARP");
  const bool warp_select = warp_on && n_expert <= kThreads && n_used * (kThreads / 32) <= kRouterCand;
  launch_k(router_kernel, static_cast<unsigned>(n_tok), kThreads, smem,
      logits, n_expert, bias, tid2eid, tokens, pos, n_used, scale, probs, sel, weights, order, warp_select);
}

void swiglu(const float* gate, const float* up, int groups, int64_t n, float clamp, const float* w,
            float* out) {
  launch_k(swiglu_kernel, blocks_for(groups * n), kThreads, 0, gate, up, groups, n, clamp, w, out);
}

void norm_rope(float* x, const float* weight, int64_t dim, int n_rows, float eps, const float* table,
               int n_pair, const int64_t* pos, int64_t n_fp8, float* raw, int64_t raw_cap, int n_tok) {
  if (raw) n_tok = 1;  // the KV store is one row at a time
  const NormRopeRows a{x, weight, n_rows, n_fp8, raw != nullptr, raw, raw_cap}, none{};
  launch_k(norm_rope_kernel, dim3(static_cast<unsigned>(n_rows), static_cast<unsigned>(n_tok)), kThreads, 0, a, none,
           dim, eps, table, n_pair, pos);
}

void q_kv_norm_rope(float* q, int n_head, float* kv, const float* kv_weight, int64_t dim, float eps,
                    const float* table, int n_pair, const int64_t* pos, int64_t n_fp8, float* raw, int64_t raw_cap) {
  const NormRopeRows a{q, nullptr, n_head, 0, false, nullptr, 1}, b{kv, kv_weight, 1, n_fp8, true, raw, raw_cap};
  launch_k(norm_rope_kernel, dim3(static_cast<unsigned>(n_head + 1), 1u), kThreads, 0, a, b, dim, eps, table, n_pair,
           pos);
}

void kv_norm_rope_rows(float* x, const float* weight, int64_t dim, float eps, const float* table, int n_pair,
                       const int64_t* pos, int64_t n_fp8, int n_tok) {
  if (n_tok <= 0) return;
  const NormRopeRows a{x, weight, 1, n_fp8, true, nullptr, 1}, none{};
  launch_k(norm_rope_kernel, dim3(1, static_cast<unsigned>(n_tok)), kThreads, 0, a, none, dim, eps, table, n_pair,
           pos);
}

void kv_ring_store(const float* rows, int64_t dim, const int64_t* pos, float* raw, int64_t raw_cap, int n_tok) {
  const int first = n_tok > raw_cap ? n_tok - static_cast<int>(raw_cap) : 0;
  if (n_tok - first <= 0) return;
  launch_k(kv_ring_store_kernel, static_cast<unsigned>(n_tok - first), kThreads, 0, rows, dim, pos, raw, raw_cap, first);
}

void moe_combine_hc_post(const float* down, const int32_t* order, int n_used, int64_t d, const float* shared,
                         const float* x, const float* post, const float* comb, int n_hc, float* out, int n_tok) {
  launch_k(moe_combine_hc_post_kernel, dim3(blocks_for(n_hc * d), static_cast<unsigned>(n_tok)), kThreads, 0, down,
           order, n_used, d, shared, x,
                                                                             post, comb, n_hc, out);
}

void localize_experts(const int32_t* sel, int n_used, int begin, int end, int32_t* local) {
  launch_k(localize_experts_kernel, 1, 32, 0, sel, n_used, begin, end, local);
}

void sum_slots(const float* slots, int n_slots, int64_t n, float* y) {
  launch_k(sum_slots_kernel, blocks_for(n), kThreads, 0, slots, n_slots, n, y);
}

cudaStream_t& launch_stream() {
  static thread_local cudaStream_t s = nullptr;
  return s;
}

bool& pdl_suppressed() {
  static thread_local bool off = false;
  return off;
}

bool env_is_zero(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "0") == 0;
}

bool env_is_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

size_t smem_limit() {
  // Read at every call (a few launchers per step ask; tests change it between sessions).
  size_t cap = SIZE_MAX;
  if (const char* v = std::getenv("DS4_CUDA_SMEM_LIMIT")) {
    const char* end = v + std::strlen(v);
    const auto r = std::from_chars(v, end, cap);  // digits only: no sign, no space, no overflow
    if (r.ec != std::errc() || r.ptr != end || cap < 16384)
      fail("DS4_CUDA_SMEM_LIMIT \"{}\" is not a shared memory size in bytes (a whole number from 16384)", v);
  }
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess || optin <= 0)
    optin = 48 * 1024;
  return std::min(static_cast<size_t>(optin), cap);
}

bool pdl_enabled() {
  static const bool off = env_is_zero("DS4_CUDA_PDL") || StepProfile::requested();
  return !off && cc_major() >= 9;
}

}  // namespace ds4::cuda
