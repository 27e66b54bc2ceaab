// Hyper-connection kernels (spec §3.3, model/hyper_connections): the fused norm + projection,
// the pre weights with the sublayer's input norm, the Sinkhorn split, hc_post and the output
// head's collapse. Same operation order as the CPU units.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

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

// The HC split's pre weights (threads t < n), then sub_in = sum_r pre[r] * x[r] and, with
// norm_w, h = rms_norm(sub_in) * norm_w (the sublayer's attn_norm / ffn_norm, model::rms_norm):
// everything the sublayer's first matvec waits for, without the Sinkhorn iterations. One token,
// the whole block (1024 threads: the norm's partial sums depend on the block size). `mix` is
// read past L1: in hc_norm_matvec's last block it holds the other blocks' results.
// ps: phase stamps in a -DDS4_CUDA_PHASE_STAMPS build (phase_stamps.cuh), else null.
__device__ void hc_pre_block(const float* mix, const HcPreArgs& a, PhaseStamps* ps = nullptr) {
  const int n = a.n_hc;
  const int64_t d = a.d;
  const float* x = a.x;
  __shared__ float s_pre[kMaxHcStreams];
  const int t = threadIdx.x;
  if (t < n) {
    const float z = __ldcg(mix + t) * a.scale[0] + a.base[t];
    a.pre[t] = s_pre[t] = 1.0f / (1.0f + exp_f(-z)) + a.eps;
  }
  __syncthreads();
  DS4_PHASE_PTR(ps);
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
  __syncthreads();
  block_quantize_row(a.h, d, nullptr, a.h_q8_k);
  DS4_PHASE_PTR(ps);
}

// hc_pre_block for token blockIdx.x of a batch.
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
  hc_pre_block(mix, a);
}

// HC projection with its input norm (rms_norm_unweighted then model::hc_projection), one block
// per output row: the block stages x and the row in shared memory (cp.async), takes the f64 sum
// of squares, forms every product w[i] * (x[i] * s), then threads 0..63 add them in
// hc_projection's 64 chains (element i into chain i mod 64) and its halving tree. 24-row HC
// matrices thereby cost one launch and ~2 shared-memory passes instead of a norm launch and a
// 3-block matvec. With
// tail.ticket set, the last block to finish (last_block_done) runs hc_pre_block on y, so the
// HC pre weights need no launch of their own.
template <uint32_t kType>  // ggml type: F32 (0), F16 (1), BF16 (30)
__device__ float load_float_w(const uint8_t* w, int64_t i) {
  if constexpr (kType == 0) return reinterpret_cast<const float*>(w)[i];
  else if constexpr (kType == 1) return __half2float(__ushort_as_half(reinterpret_cast<const uint16_t*>(w)[i]));
  else return __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(w)[i]) << 16);  // BF16
}

// model::hc_projection's halving tree over the 64 chains held by threads 0..63 of the block
// (chain c in thread c; the whole block calls it): s = 32 through shared memory, then s = 16 .. 1
// by shuffles in warp 0. The row's value, valid in thread 0.
__device__ float hc_chain_tree(float a) {
  __shared__ float hi[32];
  if (threadIdx.x >= 32 && threadIdx.x < kHcChains) hi[threadIdx.x - 32] = a;
  __syncthreads();
  if (threadIdx.x < 32) {
    a = a + hi[threadIdx.x];
    for (int off = 16; off >= 1; off >>= 1) a = a + __shfl_down_sync(0xffffffffu, a, off);
  }
  return a;
}

template <uint32_t kType>
__global__ void __launch_bounds__(1024) hc_norm_matvec_kernel(const uint8_t* w, size_t row_bytes, int64_t cols,
                                                              const float* x, float eps, float* y, HcPreArgs tail) {
  extern __shared__ __align__(16) uint8_t hc_smem[];
  float* v = reinterpret_cast<float*>(hc_smem);  // x, then the products w[i] * (x[i] * s)
  uint8_t* wrow = hc_smem + cols * 4;
  const uint8_t* src = w + blockIdx.x * row_bytes;
  DS4_PHASE_BEGIN(ps);
  // The weight row is constant: in flight while the launch before may still run (PDL).
  for (int64_t i = threadIdx.x; i < static_cast<int64_t>(row_bytes / 16); i += blockDim.x)
    cp_async16(wrow + 16 * i, src + 16 * i);
  pdl_wait();
  DS4_PHASE(ps);
  pdl_trigger();
  for (int64_t i = threadIdx.x; i < cols / 4; i += blockDim.x) cp_async16(v + 4 * i, x + 4 * i);
  cp_async_wait();
  __syncthreads();
  DS4_PHASE(ps);
  double acc = 0;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) acc += static_cast<double>(v[i]) * v[i];
  const float sc = block_rms_from_partial(acc, cols, eps);  // synchronises the block
  DS4_PHASE(ps);
  // The products do not depend on the summation order, so every thread forms its share; only
  // the 16 lane chains below are sequential.
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) v[i] = load_float_w<kType>(wrow, i) * (v[i] * sc);
  __syncthreads();
  DS4_PHASE(ps);
  // Chain c (threads 0..63, warps 0-1) in steps of 8 products, the next step's loads issued
  // before this step's adds so the sequential adds do not wait a shared-memory round trip each.
  const int c = threadIdx.x;
  float a = 0.0f;
  if (c < kHcChains) {
    constexpr int kStep = 8 * kHcChains;
    const int64_t full = cols / kStep * kStep;
    int64_t i = c;
    float p[8], pn[8] = {};
#pragma unroll
    for (int u = 0; u < 8; ++u) p[u] = full > 0 ? v[i + kHcChains * u] : 0.0f;
    for (; i < full; i += kStep) {
      if (i + kStep < full) {
#pragma unroll
        for (int u = 0; u < 8; ++u) pn[u] = v[i + kStep + kHcChains * u];
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) a = a + p[u];
#pragma unroll
      for (int u = 0; u < 8; ++u) p[u] = pn[u];
    }
    for (; i < cols; i += kHcChains) a = a + v[i];
  }
  DS4_PHASE(ps);
  const float out = hc_chain_tree(a);
  DS4_PHASE(ps);
  if (threadIdx.x == 0) y[blockIdx.x] = out;
  const bool last = tail.ticket && last_block_done(tail.ticket, gridDim.x);
  DS4_PHASE(ps);
  if (last) hc_pre_block(y, tail, DS4_PHASE_ADDR(ps));  // uniform
  DS4_PHASE_PRINT(ps, last ? "hc_tail" : "hc", blockIdx.x == 0 || last);
}

// The batched form of hc_norm_matvec_kernel, in two launches. hc_row_scale_kernel: one
// 1024-thread block per token takes its rms scale exactly as hc_norm_matvec_kernel does (same
// partition of the f64 sum of squares). hc_chain_matvec_kernel: a warp per row of the matrix
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

__global__ void __launch_bounds__(1024) hc_row_scale_kernel(const float* x, int64_t cols, float eps, float* scales) {
  pdl_wait();
  pdl_trigger();
  const float s = block_rms_scale(x + blockIdx.x * cols, cols, eps);
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
          a0[j] = a0[j] + wc[k].x * (xv.x * sc[j]);
          a1[j] = a1[j] + wc[k].y * (xv.y * sc[j]);
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
    if (live && lane == 0 && t0 + j < n_tok) y[static_cast<int64_t>(t0 + j) * rows + r] = v0 + v1;
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
  return {scale, base, n_hc, eps, x, d, pre, sub_in, norm_w, norm_eps, h, h_q8_0, h_q8_k, nullptr};
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
  const size_t smem = static_cast<size_t>(cols) * 4 + row_bytes;
  if (pre && !pre->ticket) return false;  // the tail needs its ticket
  if (!hc_norm_matvec_fits(type, row_bytes, rows, cols, w, x, smem)) return false;
  const void* k = type == 0   ? reinterpret_cast<const void*>(hc_norm_matvec_kernel<0>)
                  : type == 1 ? reinterpret_cast<const void*>(hc_norm_matvec_kernel<1>)
                              : reinterpret_cast<const void*>(hc_norm_matvec_kernel<30>);
  allow_dynamic_smem(k, smem);
  const auto grid = static_cast<unsigned>(rows);
  const HcPreArgs tail = pre ? *pre : HcPreArgs{};
  if (type == 0) launch_k(hc_norm_matvec_kernel<0>, grid, 1024, smem, w, row_bytes, cols, x, eps, y, tail);
  else if (type == 1) launch_k(hc_norm_matvec_kernel<1>, grid, 1024, smem, w, row_bytes, cols, x, eps, y, tail);
  else launch_k(hc_norm_matvec_kernel<30>, grid, 1024, smem, w, row_bytes, cols, x, eps, y, tail);
  return true;
}

bool hc_norm_matvec_batch(uint32_t type, const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols,
                          const float* x, float eps, float* scales, float* y, int n_tok) {
  if (!hc_norm_matvec_fits(type, row_bytes, rows, cols, w, x, 0) || n_tok <= 0) return false;
  launch_k(hc_row_scale_kernel, static_cast<unsigned>(n_tok), 1024, 0, x, cols, eps, scales);
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
