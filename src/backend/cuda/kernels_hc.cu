// Hyper-connection kernels (spec §3.3, model/hyper_connections): the fused norm + projection,
// the pre weights with the sublayer's input norm, the Sinkhorn split, hc_post and the output
// head's collapse. Same operation order as the CPU units.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/phase_stamps.cuh"

namespace ds4::cuda {
namespace {

constexpr int kHcChains = 64;  // model::kHcProjChains: the projection's sum chains, two warps

// The HC split's post weights and Sinkhorn combine matrix (model::hc_split_sinkhorn), one warp:
// the n x n matrix lives in registers (lane r*n + c holds entry (r, c); n <= kMaxHcStreams),
// every row or column sum gathers its n entries by shuffles and adds them in the CPU's order.
__global__ void hc_sinkhorn_kernel(const float* mix, const float* scale, const float* base, int n, int iters,
                                   float eps, float* post, float* comb) {
  pdl_wait();
  pdl_trigger();
  mix += blockIdx.x * (2 * n + n * n);  // token blockIdx.x of a batch
  post += blockIdx.x * n;
  comb += blockIdx.x * n * n;
  constexpr unsigned kAll = 0xffffffffu;
  const int t = threadIdx.x;
  if (t < n) {
    const float z2 = mix[n + t] * scale[1] + base[n + t];
    post[t] = 2.0f / (1.0f + exp_f(-z2));
  }
  const bool on = t < n * n;
  const int r = on ? t / n : 0, c = on ? t % n : 0;
  float m = on ? mix[2 * n + t] * scale[2] + base[2 * n + t] : 0.0f;
  // Row softmax: max and sum over the row's entries in column order.
  float row_max = -1.0e30f;
  for (int k = 0; k < n; ++k) {
    const float v = __shfl_sync(kAll, m, r * n + k);
    if (v > row_max) row_max = v;
  }
  m = exp_f(m - row_max);
  float sum = 0.0f;
  for (int k = 0; k < n; ++k) sum += __shfl_sync(kAll, m, r * n + k);
  m = m * (1.0f / sum) + eps;
  for (int it = 0; it < iters; ++it) {
    if (it > 0) {
      float rs = 0.0f;
      for (int k = 0; k < n; ++k) rs += __shfl_sync(kAll, m, r * n + k);
      m *= 1.0f / (rs + eps);
    }
    float cs = 0.0f;
    for (int k = 0; k < n; ++k) cs += __shfl_sync(kAll, m, c + n * k);
    m *= 1.0f / (cs + eps);
  }
  if (on) comb[t] = m;
}

// The HC split's pre weight of a stream from its mix value m, scale[0] and its base
// (model::hc_split_sinkhorn's pre part).
__device__ __forceinline__ float hc_pre_weight(float m, float scale0, float base, float eps) {
  return 1.0f / (1.0f + exp_f(-(m * scale0 + base))) + eps;
}

// With the pre weights in s_pre (shared, n_hc values): sub_in = sum_r pre[r] * x[r] and, with
// norm_w, h = rms_norm(sub_in) * norm_w (the sublayer's attn_norm / ffn_norm, model::rms_norm)
// and its quantized rows: everything the sublayer's first matvec waits for, without the Sinkhorn
// iterations. One token, the whole block (1024 threads: the norm's partial sums depend on the
// block size). a.x and a.norm_w may point to shared memory (hc_norm_matvec's staged copies).
// h_stage: null, or d floats of shared memory the Q8_K rows are quantized from (the block's
// copy of h instead of a read-back of a.h); it may be a.x's copy (each thread has read its x
// values before it writes there). ps: phase stamps in a -DDS4_CUDA_PHASE_STAMPS build
// (phase_stamps.cuh), else null.
__device__ void hc_pre_sum_norm(const float* s_pre, const HcPreArgs& a, float* h_stage = nullptr,
                                PhaseStamps* ps = nullptr) {
  const int n = a.n_hc;
  const int64_t d = a.d;
  const float* x = a.x;
  // sub_in and its norm. Up to kSumRegs values per thread stay in registers, their x and weight
  // loads all issued first (in-order issue would otherwise wait a round trip per load).
  constexpr int kSumRegs = 4;
  double acc = 0;
  if (d > kSumRegs * static_cast<int64_t>(blockDim.x)) {
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      float o = 0.0f;
      for (int r = 0; r < n; ++r) o += x[r * d + i] * s_pre[r];
      a.sub_in[i] = o;
      acc += static_cast<double>(o) * o;
    }
    if (!a.norm_w) return;  // uniform: the whole block returns
    const float sc = block_rms_from_partial(acc, d, a.norm_eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) a.h[i] = a.sub_in[i] * sc * a.norm_w[i];
    __syncthreads();
    block_quantize_row(a.h, d, a.h_q8_0, a.h_q8_k);
    return;
  }
  float xv[kSumRegs][kMaxHcStreams], o[kSumRegs], wv[kSumRegs];
#pragma unroll
  for (int k = 0; k < kSumRegs; ++k) {
    const int64_t i = threadIdx.x + k * static_cast<int64_t>(blockDim.x);
#pragma unroll
    for (int r = 0; r < kMaxHcStreams; ++r) xv[k][r] = i < d && r < n ? x[r * d + i] : 0.0f;
    wv[k] = a.norm_w && i < d ? a.norm_w[i] : 0.0f;
  }
#pragma unroll
  for (int k = 0; k < kSumRegs; ++k) {
    const int64_t i = threadIdx.x + k * static_cast<int64_t>(blockDim.x);
    o[k] = 0.0f;
#pragma unroll
    for (int r = 0; r < kMaxHcStreams; ++r)
      if (r < n) o[k] += xv[k][r] * s_pre[r];
    if (i < d) {
      a.sub_in[i] = o[k];
      acc += static_cast<double>(o[k]) * o[k];
    }
  }
  DS4_PHASE_PTR(ps);
  if (!a.norm_w) return;  // uniform: the whole block returns
  const float sc = block_rms_from_partial(acc, d, a.norm_eps);
  DS4_PHASE_PTR(ps);
  float hv[kSumRegs];
#pragma unroll
  for (int k = 0; k < kSumRegs; ++k) {
    const int64_t i = threadIdx.x + k * static_cast<int64_t>(blockDim.x);
    hv[k] = o[k] * sc * wv[k];
    if (i < d) a.h[i] = hv[k];
  }
  DS4_PHASE_PTR(ps);
  if (a.h_q8_0) block_quantize_q8_0_regs(hv, d, a.h_q8_0);  // set only for d % 32 == 0
  DS4_PHASE_PTR(ps);
  if (!a.h_q8_k) return;  // uniform
  if (h_stage) {
#pragma unroll
    for (int k = 0; k < kSumRegs; ++k) {
      const int64_t i = threadIdx.x + k * static_cast<int64_t>(blockDim.x);
      if (i < d) h_stage[i] = hv[k];
    }
  }
  __syncthreads();
  block_quantize_row(h_stage ? h_stage : a.h, d, nullptr, a.h_q8_k);
  DS4_PHASE_PTR(ps);
}

// hc_pre_weights for token blockIdx.x of a batch: the pre weights (threads t < n) from mix,
// then hc_pre_sum_norm.
__global__ void __launch_bounds__(1024) hc_pre_kernel(const float* mix, HcPreArgs a) {
  pdl_wait();
  pdl_trigger();
  const int64_t tk = blockIdx.x, d = a.d;
  mix += tk * (2 * a.n_hc + a.n_hc * a.n_hc);
  a.x += tk * a.n_hc * d;
  a.pre += tk * a.n_hc;
  a.sub_in += tk * d;
  a.h += tk * d;
  if (a.h_q8_0) a.h_q8_0 += tk * (d / 32) * sizeof(BQ8_0Act);
  if (a.h_q8_k) a.h_q8_k += tk * (d / 256) * sizeof(BQ8_K);
  __shared__ float s_pre[kMaxHcStreams];
  const int t = threadIdx.x;
  if (t < a.n_hc) a.pre[t] = s_pre[t] = hc_pre_weight(__ldcg(mix + t), a.scale[0], a.base[t], a.eps);
  __syncthreads();
  hc_pre_sum_norm(s_pre, a);
}

// A weight of ggml type kType (F32 (0), F16 (1), BF16 (30)) as stored (RawW) and as f32; the
// chain loop keeps raw values in flight and converts them when it adds them, so that no
// conversion waits on a load that was just issued.
template <uint32_t kType>
using RawW = std::conditional_t<kType == 0, float, uint16_t>;
template <uint32_t kType>
__device__ __forceinline__ RawW<kType> load_raw_w(const uint8_t* w, int64_t i) {
  return reinterpret_cast<const RawW<kType>*>(w)[i];
}
template <uint32_t kType>
__device__ __forceinline__ float raw_to_float(RawW<kType> r) {
  if constexpr (kType == 0) return r;
  else if constexpr (kType == 1) return __half2float(__ushort_as_half(r));
  else return __uint_as_float(static_cast<uint32_t>(r) << 16);  // BF16
}

// The HC state norm's scale (model::rms_scale of x [cols]) by kHcNormThreads threads (those with
// threadIdx.x % kHcNormThreads == j, a whole named barrier group): thread j adds the f64 squares
// of elements j, j + kHcNormThreads, ..., the warps' partials meet by shuffles, then thread j == 0
// adds the warps' sums in order. The one partition of the sum for every HC launch (decode and
// batched), so that both give the same scale. The scale, valid in thread j == 0.
constexpr int kHcNormThreads = 512;
__device__ float hc_norm_group_scale(const float* x, int64_t cols, float eps) {
  __shared__ double part[kHcNormThreads / 32];
  const int j = static_cast<int>(threadIdx.x) % kHcNormThreads;
  double acc = 0;
  for (int64_t i = j; i < cols; i += kHcNormThreads) acc += static_cast<double>(x[i]) * x[i];
  for (int off = 16; off >= 1; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if ((j & 31) == 0) part[j / 32] = acc;
  asm volatile("bar.sync 1, %0;" ::"n"(kHcNormThreads) : "memory");
  if (j != 0) return 0.0f;
  double sum = 0;
  for (int k = 0; k < kHcNormThreads / 32; ++k) sum += part[k];
  return rms_scale_of_sum(sum, cols, eps);
}

// Chain c of one row (model::hc_projection: the f32 products w[i] * x[i] of i = c, c + 64, ...
// added in order) from the row wr and x in shared memory, in steps of 8 products. Two register
// sets take turns: a step's loads are issued into one set while the other set's products are
// added, so no value is copied between sets (a copy would wait for the load just issued). The
// step index of a load is clamped to the last step, so every load is unconditional; the extra
// loads of the last pair are never added.
template <uint32_t kType>
__device__ float hc_chain_sum(const uint8_t* wr, const float* xs, int64_t cols, int c) {
  constexpr int kU = 8, kStep = kU * kHcChains;
  const int steps = static_cast<int>(cols / kStep);
  float a = 0.0f;
  if (steps > 0) {
    RawW<kType> wa[kU], wb[kU];
    float xa[kU], xb[kU];
    auto load = [&](int s, RawW<kType>* wv, float* xv) {
      const int64_t i = static_cast<int64_t>(min(s, steps - 1)) * kStep + c;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        wv[u] = load_raw_w<kType>(wr, i + kHcChains * u);
        xv[u] = xs[i + kHcChains * u];
      }
    };
    auto add = [&](const RawW<kType>* wv, const float* xv) {
#pragma unroll
      for (int u = 0; u < kU; ++u) a = a + raw_to_float<kType>(wv[u]) * xv[u];
    };
    load(0, wa, xa);
    int s = 0;
    for (; s + 1 < steps; s += 2) {
      load(s + 1, wb, xb);
      add(wa, xa);
      load(s + 2, wa, xa);
      add(wb, xb);
    }
    if (s < steps) add(wa, xa);
  }
  for (int64_t i = static_cast<int64_t>(steps) * kStep + c; i < cols; i += kHcChains)
    a = a + raw_to_float<kType>(load_raw_w<kType>(wr, i)) * xs[i];
  return a;
}

// model::hc_projection's halving tree for the block's first 2 * nrows warps, row r's 64 chains
// in warps 2r and 2r + 1 (chain c in lane c % 32 of warp 2r + c / 32; the whole block calls it):
// s = 32 through shared memory, then s = 16 .. 1 by shuffles in warp 2r. Row r's sum, valid in
// lane 0 of warp 2r.
__device__ float hc_chain_trees(float a, int nrows) {
  __shared__ float hi[kMaxHcStreams][32];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = threadIdx.x & 31;
  const bool chains = warp < 2 * nrows;
  if (chains && (warp & 1)) hi[warp / 2][lane] = a;
  __syncthreads();
  if (chains && !(warp & 1)) {
    a = a + hi[warp / 2][lane];
    for (int off = 16; off >= 1; off >>= 1) a = a + __shfl_down_sync(0xffffffffu, a, off);
  }
  return a;
}

// HC control mixes y = hc_norm_projection(W, x) (model::hc_norm_projection: model::hc_projection's
// 64 chains and tree, times the state's rms scale), 1024 threads per block: block 0 takes rows
// [0, lead), block b > 0 row lead + b - 1. The block stages x and its rows in shared memory
// (cp.async; the rows, constant, before pdl_wait), then warps 2r and 2r + 1 run row r's chains
// while the last kHcNormThreads threads take the scale beside them.
// With lead = tail.n_hc (tail.norm_w or not), block 0's rows are the pre mixes and it goes on
// to hc_pre_sum_norm with x from shared memory (and norm_w, staged with the rows, after them):
// the sublayer's input waits for one block and no other (the post and combine rows are read by
// hc_sinkhorn, after this launch).
template <uint32_t kType>
__global__ void __launch_bounds__(1024) hc_norm_matvec_kernel(const uint8_t* w, size_t row_bytes, int64_t cols,
                                                              const float* x, float eps, float* y, int lead,
                                                              HcPreArgs tail) {
  extern __shared__ __align__(16) uint8_t hc_smem[];
  float* xs = reinterpret_cast<float*>(hc_smem);  // x [cols]
  uint8_t* wrows = hc_smem + cols * 4;             // the block's rows
  const int nrows = blockIdx.x == 0 ? lead : 1;
  const int64_t row0 = blockIdx.x == 0 ? 0 : lead + blockIdx.x - 1;
  const uint8_t* src = w + row0 * row_bytes;
  const bool pre_block = blockIdx.x == 0 && lead == tail.n_hc;
  DS4_PHASE_BEGIN(ps);
  for (int64_t i = threadIdx.x; i < static_cast<int64_t>(nrows * row_bytes / 16); i += blockDim.x)
    cp_async16_weight(wrows + 16 * i, src + 16 * i);
  // The tail's constants, also before the wait: norm_w after the rows, scale and base in registers.
  float* norm_s = reinterpret_cast<float*>(wrows + nrows * row_bytes);
  float pre_scale = 0.0f, pre_base = 0.0f;
  if (pre_block) {  // uniform
    if (tail.norm_w) {
      for (int64_t i = threadIdx.x; i < tail.d / 4; i += blockDim.x) cp_async16(norm_s + 4 * i, tail.norm_w + 4 * i);
      tail.norm_w = norm_s;
    }
    if (threadIdx.x < tail.n_hc) {
      pre_scale = tail.scale[0];
      pre_base = tail.base[threadIdx.x];
    }
  }
  pdl_wait();
  DS4_PHASE(ps);
  pdl_trigger();
  for (int64_t i = threadIdx.x; i < cols / 4; i += blockDim.x) cp_async16(xs + 4 * i, x + 4 * i);
  cp_async_wait();
  __syncthreads();
  DS4_PHASE(ps);
  __shared__ float s_scale, s_mix[kMaxHcStreams];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  float a = 0.0f;
  if (warp < 2 * nrows) {
    a = hc_chain_sum<kType>(wrows + (threadIdx.x / kHcChains) * row_bytes, xs, cols, threadIdx.x % kHcChains);
  } else if (threadIdx.x >= blockDim.x - kHcNormThreads) {
    const float sc = hc_norm_group_scale(xs, cols, eps);
    if (threadIdx.x == blockDim.x - kHcNormThreads) s_scale = sc;
  }
  DS4_PHASE(ps);
  a = hc_chain_trees(a, nrows);  // its barrier also publishes s_scale
  if ((threadIdx.x & 63) == 0 && warp < 2 * nrows) {
    const float m = a * s_scale;
    y[row0 + warp / 2] = m;
    s_mix[warp / 2] = m;
  }
  DS4_PHASE(ps);
  if (pre_block) {  // uniform
    __shared__ float s_pre[kMaxHcStreams];
    __syncthreads();
    if (threadIdx.x < tail.n_hc)
      tail.pre[threadIdx.x] = s_pre[threadIdx.x] = hc_pre_weight(s_mix[threadIdx.x], pre_scale, pre_base, tail.eps);
    __syncthreads();
    DS4_PHASE(ps);
    tail.x = xs;
    hc_pre_sum_norm(s_pre, tail, xs, DS4_PHASE_ADDR(ps));
  }
  DS4_PHASE_PRINT(ps, pre_block ? "hc_pre" : "hc", blockIdx.x <= 1);
}

// The batched form of hc_norm_matvec_kernel, in two launches. hc_row_scale_kernel: one
// kHcNormThreads block per token takes its rms scale exactly as hc_norm_matvec_kernel does
// (hc_norm_group_scale). hc_chain_matvec_kernel: a warp per row of the matrix
// (up to 32 rows per block, so flash's 24 rows share one staging of x) and kTok tokens per
// block; lane l runs chains 2l and 2l + 1 of model::hc_projection (adjacent columns: one 4- or
// 8-byte weight load per 64 columns, straight from global into registers, the next tile's
// issued before this tile's adds) for every token at once. The tokens' x tiles of kChainCols
// columns are double-buffered in shared memory by cp.async. hc_projection's halving tree is
// then five shuffles per chain and the pair's sum: at level s chain c = 2l meets chain c + s,
// which lane l + s / 2 holds.
constexpr int kChainCols = 512;  // a multiple of kHcChains: a tile's column i is chain i mod 64
constexpr int kChainSteps = kChainCols / kHcChains;  // column pairs per lane per tile
// Tokens per block: prefill at 2K / 8K measured 2,686 / 1,970 tok/s with 2, 2,740 / 1,998 with
// 4, 2,766 / 2,012 with 8 (flash's 24 x 16384 F16 matrix, 512-token chunks).
constexpr int kHcBatchTokens = 8;

__global__ void __launch_bounds__(kHcNormThreads) hc_row_scale_kernel(const float* x, int64_t cols, float eps,
                                                                      float* scales) {
  pdl_wait();
  pdl_trigger();
  const float s = hc_norm_group_scale(x + blockIdx.x * cols, cols, eps);
  if (threadIdx.x == 0) scales[blockIdx.x] = s;
}

// Values i and i + 1 (i even) of a weight row of kType (0 F32, 1 F16, 30 BF16) as f32.
template <uint32_t kType>
__device__ float2 load_float_w2(const uint8_t* w, int64_t i) {
  if constexpr (kType == 0) return reinterpret_cast<const float2*>(w)[i / 2];
  const uint32_t u = reinterpret_cast<const uint32_t*>(w)[i / 2];
  if constexpr (kType == 1) return __half22float2(*reinterpret_cast<const __half2*>(&u));
  else return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));  // BF16
}

template <uint32_t kType, int kTok>
__global__ void __launch_bounds__(1024) hc_chain_matvec_kernel(const uint8_t* __restrict__ w, size_t row_bytes,
                                                               int64_t rows, int64_t cols, const float* __restrict__ x,
                                                               const float* __restrict__ scales, float* __restrict__ y,
                                                               int n_tok, int rows_per_block) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ __align__(16) float xs[];  // [2 buffers][kTok][kChainCols]
  const int t0 = blockIdx.x * kTok, lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.y) * rows_per_block + threadIdx.x / 32;
  const bool live = r < rows;  // a warp-uniform: spare warps still take part in the barriers
  const uint8_t* wr = w + (live ? r : 0) * row_bytes;
  float sc[kTok], a0[kTok], a1[kTok];  // a0: chain 2 lane, a1: chain 2 lane + 1
#pragma unroll
  for (int j = 0; j < kTok; ++j) {
    sc[j] = scales[t0 + j < n_tok ? t0 + j : t0];  // tokens past n_tok repeat t0 and are not stored
    a0[j] = a1[j] = 0.0f;
  }
  auto stage = [&](int64_t col0, int buf) {  // one commit group per tile
    const int xq = static_cast<int>(cols - col0 < kChainCols ? cols - col0 : kChainCols) / 4;  // cols % 16 == 0
    for (int k = threadIdx.x; k < kTok * xq; k += blockDim.x) {
      const int j = k / xq, t = t0 + j < n_tok ? t0 + j : t0;
      cp_async16(xs + (buf * kTok + j) * kChainCols + 4 * (k % xq), x + t * cols + col0 + 4 * (k % xq));
    }
    cp_async_commit();
  };
  auto load_w = [&](int64_t col0, float2* dst) {  // i even and cols even: i < cols covers i + 1
#pragma unroll
    for (int k = 0; k < kChainSteps; ++k) {
      const int64_t i = col0 + 2 * lane + kHcChains * k;
      dst[k] = live && i < cols ? load_float_w2<kType>(wr, i) : make_float2(0.0f, 0.0f);
    }
  };
  float2 wc[kChainSteps], wn[kChainSteps];
  stage(0, 0);
  load_w(0, wc);
  const int64_t tiles = (cols + kChainCols - 1) / kChainCols;
  for (int64_t tile = 0; tile < tiles; ++tile) {
    const int64_t col0 = tile * kChainCols;
    if (tile + 1 < tiles) {
      stage(col0 + kChainCols, static_cast<int>((tile + 1) & 1));
      load_w(col0 + kChainCols, wn);
    } else {
      cp_async_commit();  // an empty group keeps the count: the wait below always leaves one
    }
    cp_async_wait_group<1>();
    __syncthreads();  // this tile's x from every thread's copies
    const float* xb = xs + (tile & 1) * kTok * kChainCols;
#pragma unroll
    for (int k = 0; k < kChainSteps; ++k) {
      const int il = 2 * lane + kHcChains * k;
      if (col0 + il < cols) {
#pragma unroll
        for (int j = 0; j < kTok; ++j) {
          const float2 xv = *reinterpret_cast<const float2*>(xb + j * kChainCols + il);
          a0[j] = a0[j] + wc[k].x * xv.x;
          a1[j] = a1[j] + wc[k].y * xv.y;
        }
      }
    }
    __syncthreads();  // the buffer is consumed before the next iteration stages into it
#pragma unroll
    for (int k = 0; k < kChainSteps; ++k) wc[k] = wn[k];
  }
#pragma unroll
  for (int j = 0; j < kTok; ++j) {
    float v0 = a0[j], v1 = a1[j];
    for (int off = 16; off >= 1; off >>= 1) {
      v0 = v0 + __shfl_down_sync(0xffffffffu, v0, off);
      v1 = v1 + __shfl_down_sync(0xffffffffu, v1, off);
    }
    if (live && lane == 0 && t0 + j < n_tok) y[static_cast<int64_t>(t0 + j) * rows + r] = (v0 + v1) * sc[j];
  }
}

__global__ void hc_post_kernel(const float* y, const float* x, const float* post,
                               const float* comb, int n, int64_t d, float* out) {
  pdl_wait();
  pdl_trigger();
  const int64_t tk = blockIdx.y;  // token of a batch
  y += tk * d;
  x += tk * n * d;
  post += tk * n;
  comb += tk * n * n;
  out += tk * n * d;
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= n * d) return;
  const int c = static_cast<int>(k / d);
  const int64_t i = k % d;
  float o = y[i] * post[c];
  for (int r = 0; r < n; ++r) o += comb[c + n * r] * x[r * d + i];
  out[k] = o;
}

__global__ void hc_output_kernel(const float* logits, const float* scale, const float* base,
                                 int n, float eps, const float* x, int64_t d, float* z) {
  pdl_wait();
  pdl_trigger();
  logits += blockIdx.x * n;  // token blockIdx.x of a batch
  x += blockIdx.x * n * d;
  z += blockIdx.x * d;
  __shared__ float w[16];
  if (threadIdx.x == 0)
    for (int i = 0; i < n; ++i) {
      w[i] = sigmoid_f(logits[i] * scale[0] + base[i]) + eps;
    }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    float o = 0.0f;
    for (int r = 0; r < n; ++r) o += x[r * d + i] * w[r];
    z[i] = o;
  }
}

}  // namespace

void hc_pre_weights(const float* mix, const HcPreArgs& a, int n_tok) {
  launch_k(hc_pre_kernel, static_cast<unsigned>(n_tok), 1024, 0, mix, a);
}

HcPreArgs hc_pre_args(const float* scale, const float* base, int n_hc, float eps, const float* x, int64_t d,
                      float* pre, float* sub_in, const float* norm_w, float norm_eps, float* h, uint8_t* h_q8_0,
                      uint8_t* h_q8_k) {
  if (!norm_w || d % 32 != 0) h_q8_0 = nullptr;
  if (!norm_w || d % 256 != 0) h_q8_k = nullptr;
  return {scale, base, n_hc, eps, x, d, pre, sub_in, norm_w, norm_eps, h, h_q8_0, h_q8_k};
}

void hc_sinkhorn(const float* mix, const float* scale, const float* base, int n_hc, int iters, float eps,
                 float* post, float* comb, int n_tok) {
  launch_k(hc_sinkhorn_kernel, static_cast<unsigned>(n_tok), 32, 0, mix, scale, base, n_hc, iters, eps, post, comb);
}

namespace {
bool hc_norm_matvec_fits(uint32_t type, size_t row_bytes, int64_t rows, int64_t cols, const uint8_t* w,
                         const float* x, size_t smem) {
  const int wb = type == 0 ? 4 : (type == 1 || type == 30) ? 2 : 0;
  return wb != 0 && cols % 16 == 0 && row_bytes == static_cast<size_t>(cols) * wb && smem <= smem_limit() &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && rows > 0;
}
}  // namespace

bool hc_norm_matvec(uint32_t type, const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols,
                    const float* x, float eps, float* y, const HcPreArgs* pre) {
  const int lead = pre ? pre->n_hc : 1;  // block 0's rows
  if (lead < 1 || lead > kMaxHcStreams || lead > rows) return false;
  if (pre && (pre->x != x || pre->n_hc * pre->d != cols)) return false;  // the tail reads x's staged copy
  const bool stage_norm = pre && pre->norm_w;  // block 0 stages norm_w (16-byte copies) after its rows
  if (stage_norm && (pre->d % 4 != 0 || reinterpret_cast<uintptr_t>(pre->norm_w) % 16 != 0)) return false;
  const size_t smem = static_cast<size_t>(cols) * 4 + lead * row_bytes + (stage_norm ? pre->d * 4 : 0);
  if (!hc_norm_matvec_fits(type, row_bytes, rows, cols, w, x, smem)) return false;
  const void* k = type == 0   ? reinterpret_cast<const void*>(hc_norm_matvec_kernel<0>)
                  : type == 1 ? reinterpret_cast<const void*>(hc_norm_matvec_kernel<1>)
                              : reinterpret_cast<const void*>(hc_norm_matvec_kernel<30>);
  allow_dynamic_smem(k, smem);
  const auto grid = static_cast<unsigned>(rows - lead + 1);
  const HcPreArgs tail = pre ? *pre : HcPreArgs{};
  if (type == 0) launch_k(hc_norm_matvec_kernel<0>, grid, 1024, smem, w, row_bytes, cols, x, eps, y, lead, tail);
  else if (type == 1) launch_k(hc_norm_matvec_kernel<1>, grid, 1024, smem, w, row_bytes, cols, x, eps, y, lead, tail);
  else launch_k(hc_norm_matvec_kernel<30>, grid, 1024, smem, w, row_bytes, cols, x, eps, y, lead, tail);
  return true;
}

bool hc_norm_matvec_batch(uint32_t type, const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols,
                          const float* x, float eps, float* scales, float* y, int n_tok) {
  if (!hc_norm_matvec_fits(type, row_bytes, rows, cols, w, x, 0) || n_tok <= 0) return false;
  launch_k(hc_row_scale_kernel, static_cast<unsigned>(n_tok), kHcNormThreads, 0, x, cols, eps, scales);
  // Row groups of at most 32 rows (a warp each), as even as the count allows (40 rows: 2 x 20).
  const int64_t groups = (rows + 31) / 32;
  const int per = static_cast<int>((rows + groups - 1) / groups);
  const dim3 grid(static_cast<unsigned>((n_tok + kHcBatchTokens - 1) / kHcBatchTokens), static_cast<unsigned>(groups));
  const size_t smem = 2 * kHcBatchTokens * kChainCols * sizeof(float);
  auto go = [&](auto kernel) {
    allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem);
    launch_k(kernel, grid, static_cast<unsigned>(per * 32), smem, w, row_bytes, rows, cols, x, scales, y, n_tok, per);
  };
  if (type == 0) go(hc_chain_matvec_kernel<0, kHcBatchTokens>);
  else if (type == 1) go(hc_chain_matvec_kernel<1, kHcBatchTokens>);
  else go(hc_chain_matvec_kernel<30, kHcBatchTokens>);
  return true;
}

void hc_post(const float* y, const float* x, const float* post, const float* comb, int n_hc,
             int64_t d, float* out, int n_tok) {
  launch_k(hc_post_kernel, dim3(blocks_for(n_hc * d), static_cast<unsigned>(n_tok)), kThreads, 0, y, x, post, comb,
           n_hc, d, out);
}

void hc_output(const float* logits, const float* scale, const float* base, int n_hc, float eps,
               const float* x, int64_t d, float* z, int n_tok) {
  launch_k(hc_output_kernel, static_cast<unsigned>(n_tok), kThreads, 0, logits, scale, base, n_hc, eps, x, d, z);
}

}  // namespace ds4::cuda
